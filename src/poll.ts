/**
 * A poll loop outside workflow code (which cannot use real timers), shared by the Kafka waits:
 * ask until there is an answer or the time is up.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface PollOptions {
  /** After this long without an answer, `onTimeout()` is thrown (checked after each call). */
  timeoutMs: number;
  /** Pause between calls. */
  everyMs: number;
  /** Called before each pause (an activity's heartbeat). */
  onWait?: (() => void) | undefined;
  /** The error to throw at the deadline: each caller's own type and message. */
  onTimeout: () => Error;
}

/** Calls `fn` until it returns a value other than undefined and returns it; an error `fn` throws ends the poll. */
export async function pollUntil<T>(fn: () => Promise<T | undefined> | T | undefined, o: PollOptions): Promise<T> {
  const deadline = Date.now() + o.timeoutMs;
  for (;;) {
    const r = await fn();
    if (r !== undefined) return r;
    if (Date.now() > deadline) throw o.onTimeout();
    o.onWait?.();
    await sleep(o.everyMs);
  }
}
