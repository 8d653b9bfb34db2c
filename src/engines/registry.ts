/**
 * Which engine serves a catalog model: the built-in ones by default, upstream pools for models
 * whose `upstream` names an [[upstreams]] entry. Engines register themselves here at startup.
 */
import type { CatalogModel } from "../core/models";
import type { ChatEngine, EngineLookup, ImageEngine } from "../core/engine";

export class EngineRegistry implements EngineLookup {
  private readonly image = new Map<string, ImageEngine>();
  private readonly chat = new Map<string, ChatEngine>();

  /** `upstream` is "builtin" or an upstream id. */
  registerImage(upstream: string, engine: ImageEngine): void {
    this.image.set(upstream, engine);
  }

  registerChat(upstream: string, engine: ChatEngine): void {
    this.chat.set(upstream, engine);
  }

  imageEngine(model: CatalogModel): ImageEngine | undefined {
    return this.image.get(model.upstream);
  }

  chatEngine(model: CatalogModel): ChatEngine | undefined {
    return this.chat.get(model.upstream);
  }
}
