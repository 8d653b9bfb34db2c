/**
 * Deadlines of in-flight work (a request's, an attempt's) on one shared timer instead of a
 * `setTimeout` each. Nearly every deadline is cancelled long before it is due (the upstream
 * answered), and work of one kind always waits the same configured time, so deadlines of one
 * duration fall due in the order they were set: each duration is a FIFO lane, a deadline is an
 * entry appended to its lane, and cancelling one only clears its callback. One real timer is
 * armed for the earliest entry still wanted. A cancelled entry costs nothing more than its
 * place in the lane until the lane is trimmed: entries at the head are dropped when they are
 * cancelled (work usually ends in the order it started), and a lane holding many more
 * cancelled entries than live ones (a slow request at its head) is compacted.
 */
import { timerDelay } from "./timerDelay";

export interface Scheduled {
  /** The callback will not run (a no-op once it has run or was cancelled). */
  cancel(): void;
}

class Entry implements Scheduled {
  constructor(
    readonly due: number,
    public fire: (() => void) | null,
    private readonly lane: Lane,
  ) {}

  cancel(): void {
    if (this.fire === null) return;
    this.fire = null;
    this.lane.cancelled(this);
  }
}

class Lane {
  entries: Entry[] = [];
  head = 0;
  live = 0;

  /** Drops cancelled entries at the head, and compacts when the cancelled ones far outnumber the live. */
  cancelled(entry: Entry): void {
    this.live--;
    if (this.entries[this.head] === entry) {
      while (this.head < this.entries.length && this.entries[this.head]!.fire === null) this.head++;
    }
    const held = this.entries.length - this.head;
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    } else if (held > 4096 && held > 4 * (this.live + 1)) {
      this.entries = this.entries.slice(this.head).filter((e) => e.fire !== null);
      this.head = 0;
    }
  }
}

const lanes = new Map<number, Lane>();
let timer: ReturnType<typeof setTimeout> | null = null;
let armedFor = Number.POSITIVE_INFINITY;

/** Runs `fire` once after `ms` milliseconds unless cancelled first; `fire` must not throw. */
export function runAfter(ms: number, fire: () => void): Scheduled {
  const delay = Math.max(0, ms);
  const due = performance.now() + delay;
  let lane = lanes.get(delay);
  if (!lane) lanes.set(delay, (lane = new Lane()));
  const entry = new Entry(due, fire, lane);
  lane.entries.push(entry);
  lane.live++;
  if (due < armedFor) arm(due);
  return entry;
}

function arm(due: number): void {
  if (timer) clearTimeout(timer);
  armedFor = due;
  // Capped (core/timerDelay): an entry further off than the timers reach is re-armed for by fireDue.
  timer = setTimeout(fireDue, timerDelay(due - performance.now()));
}

/** Runs every entry that is due, then arms the timer for the earliest one left. */
function fireDue(): void {
  timer = null;
  armedFor = Number.POSITIVE_INFINITY;
  const now = performance.now();
  const due: Array<{ at: number; fire: () => void }> = [];
  let next = Number.POSITIVE_INFINITY;
  for (const [delay, lane] of lanes) {
    while (lane.head < lane.entries.length) {
      const entry = lane.entries[lane.head]!;
      if (entry.fire !== null && entry.due > now) {
        next = Math.min(next, entry.due);
        break;
      }
      lane.head++;
      if (entry.fire !== null) {
        due.push({ at: entry.due, fire: entry.fire });
        entry.fire = null;
        lane.live--;
      }
    }
    if (lane.head === lane.entries.length) lanes.delete(delay);
  }
  // Armed before the callbacks run: one that sets a new deadline sees the timer in place.
  if (next < Number.POSITIVE_INFINITY) arm(next);
  // Lanes are visited in the order they were made: when the loop was late and deadlines of
  // several lengths fell due at once, they still run in the order they fell due.
  if (due.length > 1) due.sort((a, b) => a.at - b.at);
  for (const { fire } of due) {
    try {
      fire();
    } catch (e) {
      // One callback that throws must not keep the others from running: reported as uncaught, after them.
      queueMicrotask(() => {
        throw e;
      });
    }
  }
}
