/**
 * Polls until `cond()` holds, for at most `timeoutMs`, then fails naming `what`: the one way the
 * suite waits for something that happens on its own time (a background write, a timer, another
 * process), instead of a fixed sleep that a slower machine outruns.
 */
export async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000, pollMs = 5): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(pollMs);
  }
}
