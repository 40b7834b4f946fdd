/**
 * A poll loop outside workflow code (which cannot use real timers), shared by the Kafka waits:
 * ask until there is an answer or the time is up; and one wait for an answer with a deadline.
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

/**
 * `p`, or an error "no answer from <what> within N s" once `ms` passed. `p` goes on; its
 * outcome is dropped. The timer does not keep the process alive.
 */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from ${what} within ${ms / 1000} s`)), ms).unref();
  });
  p.catch(() => undefined);
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
