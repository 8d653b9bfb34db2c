/**
 * How the built-in engine uses the images it is given: references are scaled to cover the
 * canvas and blended in; an edit either repaints the mask's transparent area or restyles the
 * whole picture. Every function writes only the pixels its rule names.
 */
import type { Rgba } from "../../core/image/rgba";

/** How strongly references show through the generated scene (0 = not at all, 1 = only them). */
export const REFERENCE_WEIGHT = 0.5;
/** An unmasked edit: how much of the new scene replaces the input. */
export const RESTYLE_WEIGHT = 0.5;
/** A masked repaint keeps this much of the input underneath, so the new area echoes the old shapes. */
export const REPAINT_KEEP = 0.15;

/**
 * Scales `src` to cover width x height (aspect kept, centred, overflow cropped), bilinearly.
 * Downscaling by large factors aliases a little; for a blend at half strength that is invisible.
 */
export function resampleCover(src: Rgba, width: number, height: number): Rgba {
  const out = new Uint8Array(width * height * 4);
  const scale = Math.max(width / src.width, height / src.height);
  const offX = (src.width - width / scale) / 2;
  const offY = (src.height - height / scale) / 2;
  const maxX = src.width - 1;
  const maxY = src.height - 1;
  const s = src.data;
  for (let y = 0; y < height; y++) {
    const sy = Math.min(maxY, Math.max(0, (y + 0.5) / scale + offY - 0.5));
    const y0 = Math.floor(sy);
    const y1 = Math.min(maxY, y0 + 1);
    const fy = sy - y0;
    let o = y * width * 4;
    for (let x = 0; x < width; x++, o += 4) {
      const sx = Math.min(maxX, Math.max(0, (x + 0.5) / scale + offX - 0.5));
      const x0 = Math.floor(sx);
      const x1 = Math.min(maxX, x0 + 1);
      const fx = sx - x0;
      const a = (y0 * src.width + x0) * 4;
      const b = (y0 * src.width + x1) * 4;
      const c = (y1 * src.width + x0) * 4;
      const d = (y1 * src.width + x1) * 4;
      for (let k = 0; k < 4; k++) {
        const top = s[a + k]! + (s[b + k]! - s[a + k]!) * fx;
        const bottom = s[c + k]! + (s[d + k]! - s[c + k]!) * fx;
        out[o + k] = top + (bottom - top) * fy + 0.5;
      }
    }
  }
  return { width, height, data: out };
}

/**
 * Folds one more reference into a running mean of references (all already at canvas size):
 * the n-th reference moves the mean 1/n of the way towards itself, so every reference weighs
 * the same and only one extra canvas-sized buffer is ever held.
 */
export function accumulateReference(mean: Rgba, next: Rgba, n: number): void {
  const m = mean.data;
  const r = next.data;
  for (let i = 0; i < m.length; i++) m[i] = m[i]! + (r[i]! - m[i]!) / n + 0.5;
}

/** Blends the references' mean into the scene in place; a reference's transparency lets the scene through. */
export function blendReferences(scene: Rgba, references: Rgba): void {
  const s = scene.data;
  const r = references.data;
  for (let i = 0; i < s.length; i += 4) {
    const k = REFERENCE_WEIGHT * (r[i + 3]! / 255);
    if (k === 0) continue;
    s[i] = s[i]! + (r[i]! - s[i]!) * k + 0.5;
    s[i + 1] = s[i + 1]! + (r[i + 1]! - s[i + 1]!) * k + 0.5;
    s[i + 2] = s[i + 2]! + (r[i + 2]! - s[i + 2]!) * k + 0.5;
  }
}

/**
 * A masked edit. Where the mask's alpha is 255 the output pixel is the input pixel, all four
 * bytes, untouched (the output starts as a copy and those pixels are never written). Where the
 * alpha is lower the scene is painted in, fully at alpha 0 and proportionally in between, so
 * soft mask edges blend.
 */
export function repaintMasked(base: Rgba, scene: Rgba, mask: Rgba): Rgba {
  const out = new Uint8Array(base.data);
  const b = base.data;
  const s = scene.data;
  const m = mask.data;
  for (let i = 0; i < out.length; i += 4) {
    const alpha = m[i + 3]!;
    if (alpha === 255) continue;
    const w = 1 - alpha / 255;
    for (let k = 0; k < 3; k++) {
      const painted = s[i + k]! + (b[i + k]! - s[i + k]!) * REPAINT_KEEP;
      out[i + k] = b[i + k]! + (painted - b[i + k]!) * w + 0.5;
    }
    // Repainted pixels become opaque: a repaint of a transparent hole fills it.
    out[i + 3] = b[i + 3]! + (255 - b[i + 3]!) * w + 0.5;
  }
  return { width: base.width, height: base.height, data: out };
}

/** An unmasked edit: the whole input blended with the scene; the input's alpha is kept. */
export function restyle(base: Rgba, scene: Rgba): Rgba {
  const out = new Uint8Array(base.data);
  const s = scene.data;
  for (let i = 0; i < out.length; i += 4) {
    for (let k = 0; k < 3; k++) out[i + k] = out[i + k]! + (s[i + k]! - out[i + k]!) * RESTYLE_WEIGHT + 0.5;
  }
  return { width: base.width, height: base.height, data: out };
}
