/**
 * Work that outlives its HTTP request (a generation whose client went away): tracked so a
 * graceful stop can wait for it before closing the database.
 */
export class BackgroundWork {
  private readonly running = new Set<Promise<unknown>>();

  track<T>(work: Promise<T>): Promise<T> {
    this.running.add(work);
    // One reaction for either outcome (it never rejects, so nothing is left unhandled).
    const done = () => void this.running.delete(work);
    work.then(done, done);
    return work;
  }

  get size(): number {
    return this.running.size;
  }

  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }
}
