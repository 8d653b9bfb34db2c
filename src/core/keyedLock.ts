/**
 * Runs tasks one at a time per key, in the order they were asked for, within this process; tasks
 * of different keys run freely. A task's failure does not stop the next one of its key.
 *
 * The place in line is taken in the same step as the call (no await before it), so a caller
 * that has called `run` is already ordered behind every earlier caller of its key.
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    // The map holds only keys someone is in line for.
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return next;
  }
}
