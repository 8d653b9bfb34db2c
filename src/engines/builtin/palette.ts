/**
 * Turns a prompt into a colour scheme and a composition style. A few words steer it (colours,
 * "night", "ocean", "mountain" …) so a person trying the service sees their prompt reflected;
 * everything else comes from the prompt's hash.
 */
export type Rgb = readonly [number, number, number];
export type SceneStyle = "mountains" | "waves" | "orbs";

export interface Palette {
  skyTop: Rgb;
  skyHorizon: Rgb;
  glow: Rgb;
  /** Far to near. */
  layers: Rgb[];
  accents: Rgb[];
}

export interface Mood {
  hue: number;
  style: SceneStyle;
  night: boolean;
  pale: boolean;
}

const HUE_WORDS: [RegExp, number][] = [
  [/\b(red|crimson|fire|lava|blood)\b/, 2],
  [/\b(orange|sunset|autumn|amber|copper)\b/, 24],
  [/\b(yellow|gold(en)?|desert|sand|sunny|honey)\b/, 46],
  [/\b(green|forest|jungle|meadow|grass|moss|emerald)\b/, 125],
  [/\b(teal|turquoise|lagoon|mint)\b/, 172],
  [/\b(blue|sky|water|ocean|sea|ice|azure)\b/, 212],
  [/\b(purple|violet|lavender|dusk|twilight)\b/, 272],
  [/\b(pink|rose|magenta|blossom|candy)\b/, 328],
];

const STYLE_WORDS: [RegExp, SceneStyle][] = [
  [/\b(ocean|sea|waves?|beach|lake|river|water)\b/, "waves"],
  [/\b(mountains?|hills?|valley|landscape|peaks?|canyon|forest)\b/, "mountains"],
  [/\b(abstract|bubbles?|space|planets?|galaxy|orbs?|cosmic|dream)\b/, "orbs"],
];

const STYLES: SceneStyle[] = ["mountains", "waves", "orbs"];

export function readMood(prompt: string, random: () => number): Mood {
  const text = prompt.toLowerCase();
  const hueWord = HUE_WORDS.find(([re]) => re.test(text));
  const styleWord = STYLE_WORDS.find(([re]) => re.test(text));
  // Draw every random number whether or not a word decides, so one word never reshuffles the rest.
  const randomHue = random() * 360;
  const randomStyle = STYLES[Math.floor(random() * STYLES.length)]!;
  return {
    hue: hueWord ? hueWord[1] + (randomHue % 16) - 8 : randomHue,
    style: styleWord ? styleWord[1] : randomStyle,
    night: /\b(night|midnight|dark|moon(lit)?|stars?|starry|space|galaxy)\b/.test(text),
    pale: /\b(snowy?|winter|fog(gy)?|mist(y)?|pale|white|pastel)\b/.test(text),
  };
}

export function makePalette(mood: Mood, random: () => number): Palette {
  const h = mood.hue;
  // Colour harmony: analogous, complementary or triadic accents around the base hue.
  const scheme = [30, 180, 120][Math.floor(random() * 3)]!;
  const sat = mood.pale ? 0.25 : 0.45 + random() * 0.3;
  const light = mood.night ? 0.12 : mood.pale ? 0.82 : 0.45 + random() * 0.15;
  const skyTop = hsl(h + 200 * (mood.night ? 0 : 0.1), sat * 0.9, mood.night ? 0.08 : light - 0.12);
  const skyHorizon = hsl(h + scheme * 0.25, sat, mood.night ? 0.28 : Math.min(0.9, light + 0.3));
  const glow = mood.night ? hsl(h + 40, 0.3, 0.92) : hsl(h + scheme * 0.5 + 20, Math.min(1, sat + 0.3), 0.78);
  const layerCount = 4;
  const layers: Rgb[] = [];
  for (let i = 0; i < layerCount; i++) {
    const t = i / (layerCount - 1);
    const lightness = mood.night ? 0.22 - t * 0.16 : mood.pale ? 0.75 - t * 0.35 : 0.55 - t * 0.4;
    layers.push(hsl(h + scheme * 0.25 * (1 - t) + (random() - 0.5) * 20, sat * (0.7 + 0.3 * t), lightness));
  }
  const accents: Rgb[] = [0, 1, 2, 3, 4].map((i) =>
    hsl(h + scheme * (i % 3) + random() * 25, Math.min(1, sat + 0.2), mood.night ? 0.6 : 0.5 + random() * 0.3),
  );
  return { skyTop, skyHorizon, glow, layers, accents };
}

export function hsl(hue: number, s: number, l: number): Rgb {
  const h = (((hue % 360) + 360) % 360) / 360;
  const q = l < 0.5 ? l * (1 + s) : l + s - l * s;
  const p = 2 * l - q;
  const channel = (t: number) => {
    const u = t < 0 ? t + 1 : t > 1 ? t - 1 : t;
    const v = u < 1 / 6 ? p + (q - p) * 6 * u : u < 1 / 2 ? q : u < 2 / 3 ? p + (q - p) * (2 / 3 - u) * 6 : p;
    return Math.round(Math.max(0, Math.min(1, v)) * 255);
  };
  return [channel(h + 1 / 3), channel(h), channel(h - 1 / 3)];
}
