/** The model catalog: configured [[models]] plus the built-in ones, looked up by public id. */
import type { Config, ModelConfig } from "../config";

export type ModelKind = "image" | "chat";

/**
 * Where a model's answers come from: the built-in engines, or the [[upstreams]] entry with this
 * id. A tagged union, not one string, so that no upstream id can stand for the built-in engines
 * (config also refuses the upstream id "builtin", which people would read that way).
 */
export type ModelSource = { readonly kind: "builtin" } | { readonly kind: "upstream"; readonly upstreamId: string };

export const BUILTIN_SOURCE: ModelSource = Object.freeze({ kind: "builtin" });

export function upstreamSource(upstreamId: string): ModelSource {
  return { kind: "upstream", upstreamId };
}

/** The upstream id of a model served by an upstream; undefined for the built-in ones. */
export function upstreamIdOf(model: Pick<CatalogModel, "source">): string | undefined {
  return model.source.kind === "upstream" ? model.source.upstreamId : undefined;
}

/** The source in a sentence: "upstream 'oa'" or "the built-in engines". */
export function describeSource(source: ModelSource): string {
  return source.kind === "upstream" ? `upstream '${source.upstreamId}'` : "the built-in engines";
}

export interface CatalogModel {
  id: string;
  kind: ModelKind;
  ownedBy: string;
  /** Seconds since the epoch, as OpenAI reports it. */
  created: number;
  source: ModelSource;
  upstreamModel: string;
  /** Accepted `size` values; undefined means any WxH within the engine's bounds. */
  sizes?: string[];
  qualities?: string[];
  params: Record<string, unknown>;
  /** Credits one accepted request costs: an image model's configured price (default 1); 0 for chat, which is free. */
  price: number;
}

/** An image model's price when the configuration names none (the interface's "1 credit per image"). */
export const DEFAULT_IMAGE_PRICE = 1;

/** The lowest and highest image price in a catalog (what sign-up tells a newcomer); null without image models. */
export function imagePriceRange(models: readonly CatalogModel[]): { min: number; max: number } | null {
  const prices = models.filter((m) => m.kind === "image").map((m) => m.price);
  return prices.length === 0 ? null : { min: Math.min(...prices), max: Math.max(...prices) };
}

export const BUILTIN_IMAGE = "builtin-image";
export const BUILTIN_CHAT = "builtin-chat";

// A fixed timestamp keeps /v1/models (and the OpenAPI examples) stable across restarts.
const BUILTIN_CREATED = 1_767_225_600; // 2026-01-01T00:00:00Z

export class ModelCatalog {
  private readonly byId = new Map<string, CatalogModel>();
  readonly defaultImageModel: string | undefined;

  constructor(config: Config) {
    if (config.server.builtin_image) this.add(builtin(BUILTIN_IMAGE, "image", config.server.builtin_image_price));
    if (config.server.builtin_chat) this.add(builtin(BUILTIN_CHAT, "chat", 0));
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

function builtin(id: string, kind: ModelKind, price: number): CatalogModel {
  return { id, kind, ownedBy: "atelier", created: BUILTIN_CREATED, source: BUILTIN_SOURCE, upstreamModel: id, params: {}, price };
}

/** A [[models]] entry: always served by the upstream it names (config requires `upstream`). */
function fromConfig(m: ModelConfig): CatalogModel {
  if (m.upstream === undefined) throw new Error(`model ${m.id} names no upstream; loadConfig refuses such a configuration`);
  return {
    id: m.id,
    kind: m.kind,
    ownedBy: m.owned_by ?? m.upstream ?? "atelier",
    created: BUILTIN_CREATED,
    source: upstreamSource(m.upstream),
    upstreamModel: m.upstream_model ?? m.id,
    sizes: m.sizes,
    qualities: m.qualities,
    params: m.params ?? {},
    price: m.kind === "image" ? (m.price ?? DEFAULT_IMAGE_PRICE) : 0,
  };
}
