/**
 * Times the built-in image engine (render + PNG encode + decode-back check) for generations
 * and edits at 1024x1024 and 2048x2048. Prints figures; asserts nothing.
 *   bun bench/builtinImage.ts [rounds]
 */
import { encodePng, type Rgba } from "../src/core/image/codec";
import { BuiltinImageEngine } from "../src/engines/builtin/imageEngine";
import { BUILTIN_IMAGE, type CatalogModel } from "../src/core/models";
import type { ImageInput, ImageJob } from "../src/core/engine";

const rounds = Number(process.argv[2] ?? 3);
const engine = new BuiltinImageEngine();
const model: CatalogModel = { id: BUILTIN_IMAGE, kind: "image", ownedBy: "atelier", created: 0, source: { kind: "builtin" }, upstreamModel: BUILTIN_IMAGE, params: {}, price: 1 };
const job = (partial: Partial<ImageJob>): ImageJob => ({
  model, prompt: "mountains at sunset", size: null, quality: "auto", images: [], extra: {}, signal: new AbortController().signal, ...partial,
});

function input(side: number, maskHole: boolean): ImageInput {
  const data = new Uint8Array(side * side * 4);
  for (let i = 0; i < data.length; i += 4) {
    const p = i / 4;
    const x = p % side;
    const y = Math.floor(p / side);
    data[i] = x & 255; data[i + 1] = y & 255; data[i + 2] = (x ^ y) & 255;
    data[i + 3] = maskHole && x > side / 4 && x < side / 2 && y > side / 4 && y < side / 2 ? 0 : 255;
  }
  const img: Rgba = { width: side, height: side, data };
  return { bytes: encodePng(img), mime: "image/png", width: side, height: side };
}

async function time(label: string, run: () => Promise<unknown>): Promise<void> {
  const ms: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t = performance.now();
    await run();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  console.log(`${label.padEnd(34)} median ${ms[Math.floor(ms.length / 2)]!.toFixed(0).padStart(5)} ms   min ${ms[0]!.toFixed(0).padStart(5)} ms   max ${ms[ms.length - 1]!.toFixed(0).padStart(5)} ms`);
}

console.log(`builtin-image, ${rounds} rounds each (includes PNG encode and the decode-back check)`);
for (const side of [1024, 2048]) {
  const size = { width: side, height: side };
  await time(`generate ${side}x${side}`, () => engine.generate(job({ size })));
  const reference = input(512, false);
  await time(`generate ${side}x${side} + 1 reference`, () => engine.generate(job({ size, images: [reference] })));
  const base = input(side, false);
  const mask = input(side, true);
  await time(`edit ${side}x${side}, masked`, () => engine.edit(job({ images: [base], mask })));
  await time(`edit ${side}x${side}, unmasked`, () => engine.edit(job({ images: [base] })));
}
const out = await engine.generate(job({ size: { width: 1024, height: 1024 } }));
console.log(`PNG size at 1024x1024: ${(out.bytes.length / 1024).toFixed(0)} KiB`);
console.log(`peak RSS: ${(process.memoryUsage().rss / 1048576).toFixed(0)} MiB`);
