/**
 * The two servers the chat benches put beside the gateway, each run in its own process:
 *
 *   bun bench/support/chatServers.ts mock [chars]   a zero-delay OpenAI-compatible chat upstream
 *                                                   (its reply `chars` long if given)
 *   bun bench/support/chatServers.ts proxy <url>    a bare Bun fetch-proxy in front of <url>
 *
 * Each prints "port N" once it listens (startPinned in ./chatBench.ts reads it).
 */

/** The mock's answer to every POST: a small chat.completion. */
export const MOCK_ANSWER = {
  id: "chatcmpl-mock",
  object: "chat.completion",
  created: 1700000000,
  model: "mock-model",
  choices: [{ index: 0, message: { role: "assistant", content: "A red stainless kettle, 1.7 litres." }, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 },
} as const;

const PARAGRAPH =
  "The kettle is made of brushed stainless steel, holds 1.7 litres and boils in about four minutes. It has a concealed element, a 360-degree base and automatic shut-off. ";

/** Ordinary English text of exactly `chars` characters (a realistic prompt or reply). */
export function benchText(chars: number): string {
  return PARAGRAPH.repeat(Math.ceil(chars / PARAGRAPH.length)).slice(0, chars);
}

if (import.meta.main) {
  const mode = process.argv[2];
  if (mode === "mock") {
    const chars = process.argv[3] ? Number(process.argv[3]) : undefined;
    const content = chars === undefined ? MOCK_ANSWER.choices[0].message.content : benchText(chars);
    const answer = JSON.stringify({ ...MOCK_ANSWER, choices: [{ ...MOCK_ANSWER.choices[0], message: { role: "assistant", content } }] });
    // Zero delay: the same bytes for every POST.
    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(answer, { headers: { "content-type": "application/json" } }) });
    console.log(`port ${server.port}`);
  } else if (mode === "proxy") {
    const upstream = process.argv[3]!;
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(req) {
        const res = await fetch(upstream, { method: "POST", headers: { "content-type": "application/json" }, body: await req.text() });
        return new Response(await res.arrayBuffer(), { status: res.status, headers: { "content-type": "application/json" } });
      },
    });
    console.log(`port ${server.port}`);
  } else {
    throw new Error("usage: bun bench/support/chatServers.ts mock [chars] | proxy <upstream url>");
  }
}
