/** The workbench web UI at `/`: pages, forms and assets, all same-origin and session-based. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { adminRoutes } from "./adminRoutes";
import { assetsRoutes } from "./assetsRoutes";
import { authRoutes } from "./authRoutes";
import { galleryRoutes } from "./galleryRoutes";
import { keysRoutes } from "./keysRoutes";
import { languageRoutes } from "./languageRoutes";
import { pagesRoutes } from "./pagesRoutes";
import { redeemRoutes } from "./redeemRoutes";
import { usageRoutes } from "./usageRoutes";
import { webhooksRoutes } from "./webhooksRoutes";
import { parseJsonWithLimits } from "../body";

export function workbenchRoutes(services: Services) {
  const app = new Elysia({ name: "workbench" });
  if (!services.config.workbench.enabled) return app;
  // Local, so it covers the workbench's routes only: the /v1 routes have their own parsers.
  return app
    .onParse(parseJsonWithLimits)
    .use(assetsRoutes()).use(authRoutes(services)).use(languageRoutes(services)).use(keysRoutes(services)).use(pagesRoutes(services)).use(redeemRoutes(services)).use(usageRoutes(services)).use(galleryRoutes(services)).use(webhooksRoutes(services)).use(adminRoutes(services));
}
