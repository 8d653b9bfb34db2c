/**
 * Which engine serves a catalog model, by the model's source: the built-in engines are
 * registered apart from the upstream ones, so no upstream id can take over a built-in model.
 * Engines register here at startup (services.ts for the built-in ones, upstreams.ts for pools).
 */
import type { CatalogModel } from "../core/models";
import type { ChatEngine, EngineLookup, ImageEngine } from "../core/engine";

export class EngineRegistry implements EngineLookup {
  private builtinImage: ImageEngine | undefined;
  private builtinChat: ChatEngine | undefined;
  private readonly upstreamImage = new Map<string, ImageEngine>();
  private readonly upstreamChat = new Map<string, ChatEngine>();

  /** The engine of image models whose source is the built-in engines (builtin-image). */
  registerBuiltinImage(engine: ImageEngine): void {
    this.builtinImage = engine;
  }

  /** The engine of chat models whose source is the built-in engines (builtin-chat). */
  registerBuiltinChat(engine: ChatEngine): void {
    this.builtinChat = engine;
  }

  /** The engine of image models served by the [[upstreams]] entry `upstreamId`. */
  registerUpstreamImage(upstreamId: string, engine: ImageEngine): void {
    this.upstreamImage.set(upstreamId, engine);
  }

  /** The engine of chat models served by the [[upstreams]] entry `upstreamId`. */
  registerUpstreamChat(upstreamId: string, engine: ChatEngine): void {
    this.upstreamChat.set(upstreamId, engine);
  }

  imageEngine(model: CatalogModel): ImageEngine | undefined {
    const source = model.source;
    return source.kind === "builtin" ? this.builtinImage : this.upstreamImage.get(source.upstreamId);
  }

  chatEngine(model: CatalogModel): ChatEngine | undefined {
    const source = model.source;
    return source.kind === "builtin" ? this.builtinChat : this.upstreamChat.get(source.upstreamId);
  }
}
