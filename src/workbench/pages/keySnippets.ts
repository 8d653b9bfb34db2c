/**
 * Ready-to-copy code for a new key: curl, Node (`openai`), Python (`openai`) and the AI SDK,
 * each with this server's base URL and an image model the key may use. Plain text; the page
 * escapes it.
 */
export interface SnippetInput {
  /** The full key (shown once, on the creation page only). */
  secret: string;
  /** This server's API base, ending in /v1. */
  baseUrl: string;
  /** An image model the key may use. */
  model: string;
}

export interface Snippet {
  id: string;
  label: string;
  code: string;
}

/** A string literal for JS and Python source (both accept JSON's escapes for these characters). */
const lit = (s: string) => JSON.stringify(s);

/** A single-quoted shell word: ' closes, \' adds a quote, ' reopens. */
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export function keySnippets({ secret, baseUrl, model }: SnippetInput): Snippet[] {
  const body = JSON.stringify({ model, prompt: "a lighthouse at dusk", size: "512x512" });
  return [
    {
      id: "curl",
      label: "curl",
      code: `curl -s ${sh(`${baseUrl}/images/generations`)} \\
  -H ${sh(`Authorization: Bearer ${secret}`)} \\
  -H 'Content-Type: application/json' \\
  -d ${sh(body)} \\
  | jq -r '.data[0].b64_json' | base64 -d > lighthouse.png`,
    },
    {
      id: "node",
      label: "Node.js (openai)",
      code: `import OpenAI from "openai";
import { writeFileSync } from "node:fs";

const client = new OpenAI({ apiKey: ${lit(secret)}, baseURL: ${lit(baseUrl)} });
const image = await client.images.generate({ model: ${lit(model)}, prompt: "a lighthouse at dusk" });
writeFileSync("lighthouse.png", Buffer.from(image.data[0].b64_json, "base64"));`,
    },
    {
      id: "python",
      label: "Python (openai)",
      code: `import base64
from openai import OpenAI

client = OpenAI(api_key=${lit(secret)}, base_url=${lit(baseUrl)})
image = client.images.generate(model=${lit(model)}, prompt="a lighthouse at dusk")
open("lighthouse.png", "wb").write(base64.b64decode(image.data[0].b64_json))`,
    },
    {
      id: "ai-sdk",
      label: "AI SDK",
      code: `import { createOpenAI } from "@ai-sdk/openai";
import { experimental_generateImage as generateImage } from "ai";

const atelier = createOpenAI({ apiKey: ${lit(secret)}, baseURL: ${lit(baseUrl)} });
const { image } = await generateImage({ model: atelier.image(${lit(model)}), prompt: "a lighthouse at dusk" });
// image.uint8Array holds the PNG`,
    },
  ];
}
