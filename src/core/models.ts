/** The model catalog: configured [[models]] plus the built-in ones, looked up by public id. */
import type { Config, ModelConfig } from "../config";

export type ModelKind = "image" | "chat";

export interface CatalogModel {
  id: string;
  kind: ModelKind;
  ownedBy: string;
  /** Seconds since the epoch, as OpenAI reports it. */
  created: number;
  /** "builtin" or the id of an [[upstreams]] entry. */
  upstream: string;
  upstreamModel: string;
  /** Accepted `size` values; undefined means any WxH within the engine's bounds. */
  sizes?: string[];
  qualities?: string[];
  params: Record<string, unknown>;
}

export const BUILTIN_IMAGE = "builtin-image";
export const BUILTIN_CHAT = "builtin-chat";

// A fixed timestamp keeps /v1/models (and the OpenAPI examples) stable across restarts.
const BUILTIN_CREATED = 1_767_225_600; // 2026-01-01T00:00:00Z

export class ModelCatalog {
  private readonly byId = new Map<string, CatalogModel>();
  readonly defaultImageModel: string | undefined;

  constructor(config: Config) {
    if (config.server.builtin_image) this.add(builtin(BUILTIN_IMAGE, "image"));
    if (config.server.builtin_chat) this.add(builtin(BUILTIN_CHAT, "chat"));
    for (const m of config.models) this.add(fromConfig(m));
    this.defaultImageModel = config.server.default_image_model ?? this.list().find((m) => m.kind === "image")?.id;
  }

  private add(m: CatalogModel): void {
    this.byId.set(m.id, m);
  }

  get(id: string): CatalogModel | undefined {
    return this.byId.get(id);
  }

  list(): CatalogModel[] {
    return [...this.byId.values()];
  }
}

function builtin(id: string, kind: ModelKind): CatalogModel {
  return { id, kind, ownedBy: "atelier", created: BUILTIN_CREATED, upstream: "builtin", upstreamModel: id, params: {} };
}

function fromConfig(m: ModelConfig): CatalogModel {
  return {
    id: m.id,
    kind: m.kind,
    ownedBy: m.owned_by ?? m.upstream ?? "atelier",
    created: BUILTIN_CREATED,
    upstream: m.upstream ?? "builtin",
    upstreamModel: m.upstream_model ?? m.id,
    sizes: m.sizes,
    qualities: m.qualities,
    params: m.params ?? {},
  };
}
