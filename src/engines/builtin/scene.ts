/**
 * The built-in procedural renderer: sky gradient, soft clouds, a sun or moon with its glow,
 * stars at night, translucent orbs, and layered ridges (mountains or waves) with haze, grain
 * and a vignette. Everything is planned in unit coordinates from the prompt's seed, so one
 * prompt gives the same composition at every size, and the work is a fixed number of passes
 * over the pixels: cost grows with the pixel count and nothing else.
 */
import { blankRgba, type Rgba } from "../../core/image/rgba";
import { type Mood, type Palette, type Rgb, makePalette, readMood } from "./palette";
import { hashString, pixelHash, randomFrom } from "./seed";

interface Ridge {
  /** Baseline height as a fraction of the image height, measured from the top. */
  base: number;
  terms: { freq: number; phase: number; amp: number }[];
  /** Peaked (mountains) or smooth (waves, dunes). */
  peaked: boolean;
  color: Rgb;
  /** 0 = no haze (near), up to 1 = fully the horizon colour (far). */
  haze: number;
  /** A light line along the crest (wave foam). */
  crest: boolean;
}

interface Orb {
  x: number;
  y: number;
  r: number;
  color: Rgb;
  alpha: number;
}

export interface ScenePlan {
  seed: number;
  mood: Mood;
  palette: Palette;
  horizon: number;
  sun: { x: number; y: number; r: number };
  /** A coarse grid of random values, bilinearly interpolated into soft clouds. */
  clouds: { size: number; values: Float32Array };
  ridges: Ridge[];
  orbs: Orb[];
}

const CLOUD_GRID = 9;

export function planScene(prompt: string): ScenePlan {
  const seed = hashString(prompt.trim());
  const random = randomFrom(seed);
  const mood = readMood(prompt, random);
  const palette = makePalette(mood, random);
  const horizon = mood.style === "waves" ? 0.5 + random() * 0.12 : 0.55 + random() * 0.15;
  const sun = {
    x: 0.15 + random() * 0.7,
    y: mood.style === "waves" ? horizon - 0.05 - random() * 0.15 : 0.12 + random() * 0.3,
    r: mood.night ? 0.05 + random() * 0.03 : 0.07 + random() * 0.06,
  };
  const values = new Float32Array(CLOUD_GRID * CLOUD_GRID);
  for (let i = 0; i < values.length; i++) values[i] = random();

  const ridges: Ridge[] = [];
  const layerCount = mood.style === "orbs" ? 2 : mood.style === "waves" ? 4 : 4;
  for (let i = 0; i < layerCount; i++) {
    const depth = i / Math.max(1, layerCount - 1); // 0 far … 1 near
    // Mountains: one broad peaked octave plus smooth detail; waves and dunes: smooth sines only.
    const terms = [1, 2.7, 6.1].map((octave) => ({
      freq: (mood.style === "waves" ? 3 + random() * 4 : 0.8 + random() * 1.4) * octave * (1 + depth * 0.6),
      phase: random() * Math.PI * 2,
      amp: (mood.style === "mountains" ? 0.14 : mood.style === "waves" ? 0.018 : 0.05) / (octave * octave),
    }));
    const base =
      mood.style === "waves"
        ? horizon + 0.02 + depth * (0.95 - horizon) * 0.8
        : mood.style === "orbs"
          ? 0.78 + depth * 0.12
          : horizon - 0.04 + depth * (1 - horizon) * 0.75;
    ridges.push({
      base,
      terms,
      peaked: mood.style === "mountains",
      color: palette.layers[Math.round(depth * (palette.layers.length - 1))]!,
      haze: (1 - depth) * 0.55,
      crest: mood.style === "waves",
    });
  }

  const orbs: Orb[] = [];
  const orbCount = mood.style === "orbs" ? 7 + Math.floor(random() * 8) : 0;
  for (let i = 0; i < orbCount; i++) {
    orbs.push({
      x: random(),
      y: random() * (mood.style === "orbs" ? 0.85 : 0.45),
      r: mood.style === "orbs" ? 0.04 + random() * 0.18 : 0.02 + random() * 0.04,
      color: palette.accents[i % palette.accents.length]!,
      alpha: 0.35 + random() * 0.4,
    });
  }
  return { seed, mood, palette, horizon, sun, clouds: { size: CLOUD_GRID, values }, ridges, orbs };
}

export interface RenderOptions {
  /** OpenAI's `background: "transparent"`: sky pixels get alpha 0; sun, orbs and ridges stay opaque. */
  transparentSky?: boolean;
  /** Checked between bands of rows; the caller decides what an abort means. */
  checkpoint?: () => void;
}

const ROWS_PER_CHECKPOINT = 64;
/**
 * Ordered (4x4 Bayer) dithering instead of random grain: it hides banding in the long
 * gradients just as well, and its repeating pattern deflates well. Random grain of the same
 * strength made a 1024x1024 PNG three times larger (1.2 MB instead of ~0.4 MB).
 */
const BAYER4 = [0, 8, 2, 10, 12, 4, 14, 6, 3, 11, 1, 9, 15, 7, 13, 5].map((v) => (v + 0.5) / 16 - 0.5);

export function renderScene(plan: ScenePlan, width: number, height: number, options: RenderOptions = {}): Rgba {
  const img = blankRgba(width, height);
  paintSky(plan, img, options);
  for (const orb of plan.orbs) paintOrb(orb, img);
  paintRidgesAndFinish(plan, img, options);
  return img;
}

/** Pass 1: gradient sky, clouds, stars, sun glow and disc. */
function paintSky(plan: ScenePlan, img: Rgba, options: RenderOptions): void {
  const { width: w, height: h, data } = img;
  const { skyTop, skyHorizon, glow } = plan.palette;
  const minSide = Math.min(w, h);
  const sunX = plan.sun.x * w;
  const sunY = plan.sun.y * h;
  const sunR = plan.sun.r * minSide;
  const glowReach = sunR * (plan.mood.night ? 3 : 5);
  const skyAlpha = options.transparentSky ? 0 : 255;
  const cloudTint: Rgb = plan.mood.night ? [70, 80, 110] : [255, 250, 245];
  const starDensity = plan.mood.night ? 0.0015 : 0;
  const horizonPx = plan.horizon * h;
  const cloudScale = plan.clouds.size - 1;
  // The cloud noise is separable in its lookups: precompute each column's grid cells once.
  const near = columnLookup(w, cloudScale, 0);
  const far = columnLookup(w, cloudScale * 2.3, 1.7);
  for (let y = 0; y < h; y++) {
    if (y % ROWS_PER_CHECKPOINT === 0) options.checkpoint?.();
    const v = y / h;
    const t = Math.min(1, Math.pow(y / horizonPx, 1.4));
    const baseR = skyTop[0] + (skyHorizon[0] - skyTop[0]) * t;
    const baseG = skyTop[1] + (skyHorizon[1] - skyTop[1]) * t;
    const baseB = skyTop[2] + (skyHorizon[2] - skyTop[2]) * t;
    const cloudBand = Math.max(0, 1 - Math.abs(v - plan.horizon * 0.45) * 3.2);
    const nearRow = rowLookup(plan.clouds.size, v * cloudScale * 2.2);
    const farRow = rowLookup(plan.clouds.size, v * cloudScale * 2.2 * 2.3 + 3.1);
    const nearSun = Math.abs(y - sunY) < glowReach;
    let row = (y * w) << 2;
    for (let x = 0; x < w; x++, row += 4) {
      let r = baseR;
      let g = baseG;
      let b = baseB;
      if (cloudBand > 0) {
        const c = (sampleRow(plan, near, x, nearRow) * 0.65 + sampleRow(plan, far, x, farRow) * 0.35) * cloudBand;
        if (c > 0.45) {
          const k = Math.min(0.55, (c - 0.45) * 1.6);
          r += (cloudTint[0] - r) * k;
          g += (cloudTint[1] - g) * k;
          b += (cloudTint[2] - b) * k;
        }
      }
      if (starDensity > 0 && y < horizonPx && pixelHash(x, y, plan.seed) < starDensity) {
        const twinkle = 0.5 + pixelHash(y, x, plan.seed) * 0.5;
        r += (255 - r) * twinkle;
        g += (255 - g) * twinkle;
        b += (245 - b) * twinkle;
      }
      let alpha = skyAlpha;
      const dx = x - sunX;
      const dy = y - sunY;
      const d = nearSun ? Math.sqrt(dx * dx + dy * dy) : glowReach;
      if (d < glowReach) {
        const k = (1 - d / glowReach) ** 2 * 0.6;
        r += (glow[0] - r) * k;
        g += (glow[1] - g) * k;
        b += (glow[2] - b) * k;
        const disc = Math.max(0, Math.min(1, sunR - d + 0.5));
        if (disc > 0) {
          r += (glow[0] + (255 - glow[0]) * 0.5 - r) * disc;
          g += (glow[1] + (255 - glow[1]) * 0.5 - g) * disc;
          b += (glow[2] + (255 - glow[2]) * 0.5 - b) * disc;
          alpha += (255 - alpha) * disc;
        }
      }
      data[row] = r;
      data[row + 1] = g;
      data[row + 2] = b;
      data[row + 3] = alpha;
    }
  }
}

/** One axis of a wrapping value-noise lookup: the two grid cells and the smoothstep weight. */
interface Lookup {
  i0: Int32Array;
  i1: Int32Array;
  t: Float32Array;
}

function columnLookup(w: number, scale: number, offset: number): Lookup {
  const i0 = new Int32Array(w);
  const i1 = new Int32Array(w);
  const t = new Float32Array(w);
  for (let x = 0; x < w; x++) {
    const cell = rowLookup(CLOUD_GRID, (x / w) * scale + offset);
    i0[x] = cell.i0;
    i1[x] = cell.i1;
    t[x] = cell.t;
  }
  return { i0, i1, t };
}

function rowLookup(n: number, g: number): { i0: number; i1: number; t: number } {
  const g0 = Math.floor(g);
  const f = g - g0;
  const i0 = ((g0 % n) + n) % n;
  return { i0, i1: (i0 + 1) % n, t: f * f * (3 - 2 * f) };
}

/** Smooth value noise in [0, 1] at column x of a row, from the plan's coarse grid. */
function sampleRow(plan: ScenePlan, cols: Lookup, x: number, row: { i0: number; i1: number; t: number }): number {
  const n = plan.clouds.size;
  const values = plan.clouds.values;
  const a = cols.i0[x]!;
  const b = cols.i1[x]!;
  const sx = cols.t[x]!;
  const r0 = row.i0 * n;
  const r1 = row.i1 * n;
  const top = values[r0 + a]! + (values[r0 + b]! - values[r0 + a]!) * sx;
  const bottom = values[r1 + a]! + (values[r1 + b]! - values[r1 + a]!) * sx;
  return top + (bottom - top) * row.t;
}

/** Pass 2: a translucent orb with a soft rim and a highlight, touching only its bounding box. */
function paintOrb(orb: Orb, img: Rgba): void {
  const { width: w, height: h, data } = img;
  const r = orb.r * Math.min(w, h);
  const cx = orb.x * w;
  const cy = orb.y * h;
  const hx = cx - r * 0.35;
  const hy = cy - r * 0.35;
  const x0 = Math.max(0, Math.floor(cx - r - 1));
  const x1 = Math.min(w - 1, Math.ceil(cx + r + 1));
  const y0 = Math.max(0, Math.floor(cy - r - 1));
  const y1 = Math.min(h - 1, Math.ceil(cy + r + 1));
  const soft = Math.max(1, r * 0.12);
  for (let y = y0; y <= y1; y++) {
    for (let x = x0; x <= x1; x++) {
      const d = Math.hypot(x - cx, y - cy);
      if (d >= r + 0.5) continue;
      const edge = Math.min(1, (r + 0.5 - d) / soft);
      const k = orb.alpha * edge;
      const shine = Math.max(0, 1 - Math.hypot(x - hx, y - hy) / (r * 0.9)) * 0.45;
      const i = (y * w + x) << 2;
      const cr = orb.color[0] + (255 - orb.color[0]) * shine;
      const cg = orb.color[1] + (255 - orb.color[1]) * shine;
      const cb = orb.color[2] + (255 - orb.color[2]) * shine;
      data[i] = data[i]! + (cr - data[i]!) * k;
      data[i + 1] = data[i + 1]! + (cg - data[i + 1]!) * k;
      data[i + 2] = data[i + 2]! + (cb - data[i + 2]!) * k;
      data[i + 3] = data[i + 3]! + (255 - data[i + 3]!) * k;
    }
  }
}

/** Pass 3: ridges far to near (anti-aliased edges, haze, depth shading), then grain and vignette. */
function paintRidgesAndFinish(plan: ScenePlan, img: Rgba, options: RenderOptions): void {
  const { width: w, height: h, data } = img;
  const horizonColor = plan.palette.skyHorizon;
  // The crest line of every ridge, per column, in pixels.
  const crests = plan.ridges.map((ridge) => {
    const ys = new Float32Array(w);
    for (let x = 0; x < w; x++) {
      const u = x / w;
      let lift = 0;
      for (const term of ridge.terms) {
        const s = Math.sin(u * term.freq * Math.PI + term.phase);
        lift += ridge.peaked && term === ridge.terms[0] ? term.amp * (1 - Math.abs(s)) ** 1.6 : term.amp * s;
      }
      ys[x] = (ridge.base - lift) * h;
    }
    return ys;
  });
  const colors = plan.ridges.map((ridge) => {
    const k = ridge.haze;
    return [0, 1, 2].map((c) => ridge.color[c]! + (horizonColor[c]! - ridge.color[c]!) * k) as unknown as Rgb;
  });
  const foam = Math.max(1, h * 0.004);
  const cx = w / 2;
  const cy = h / 2;
  const maxD2 = cx * cx + cy * cy;
  for (let y = 0; y < h; y++) {
    if (y % ROWS_PER_CHECKPOINT === 0) options.checkpoint?.();
    let i = (y * w) << 2;
    for (let x = 0; x < w; x++, i += 4) {
      let r = data[i]!;
      let g = data[i + 1]!;
      let b = data[i + 2]!;
      let a = data[i + 3]!;
      for (let l = 0; l < crests.length; l++) {
        const below = y + 0.5 - crests[l]![x]!;
        if (below <= 0) continue;
        const cover = below >= 1 ? 1 : below;
        const color = colors[l]!;
        // Darker further below the crest, so each layer reads as a shape and not a flat band.
        const shade = 1 - Math.min(0.35, (below / h) * 1.2);
        let lr = color[0] * shade;
        let lg = color[1] * shade;
        let lb = color[2] * shade;
        if (plan.ridges[l]!.crest && below < foam) {
          const k = 0.5 * (1 - below / foam);
          lr += (255 - lr) * k;
          lg += (255 - lg) * k;
          lb += (255 - lb) * k;
        }
        r += (lr - r) * cover;
        g += (lg - g) * cover;
        b += (lb - b) * cover;
        a += (255 - a) * cover;
      }
      const dx = x - cx;
      const dy = y - cy;
      const vignette = 1 - 0.22 * ((dx * dx + dy * dy) / maxD2);
      const grain = BAYER4[((y & 3) << 2) | (x & 3)]!;
      // Uint8Array assignment truncates; clamp first so grain never wraps around.
      data[i] = clamp255(r * vignette + grain);
      data[i + 1] = clamp255(g * vignette + grain);
      data[i + 2] = clamp255(b * vignette + grain);
      data[i + 3] = clamp255(a);
    }
  }
}

function clamp255(v: number): number {
  return v < 0 ? 0 : v > 255 ? 255 : v + 0.5;
}
