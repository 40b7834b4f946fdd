/**
 * The benchmark runs the engine under test (an onceflow worker, or the at-least-once baseline)
 * in a child process so its CPU time and peak memory are its own. Parent and child talk over
 * Node's IPC channel with these messages.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';

export interface Usage {
  /** CPU time (user + system) since the last 'mark', ms. */
  cpuMs: number;
  /** Wall time since the last 'mark', ms. */
  wallMs: number;
  /** Peak resident set size of the process, MiB. */
  peakRssMb: number;
  /** Event-loop delay of the process since the last 'mark' (p99, max), ms: how long ready work waited for the single JS thread. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

export type ToChild = { type: 'mark' } | { type: 'stop' } | { type: 'start'; args: unknown };
export type FromChild =
  | { type: 'ready' }
  | { type: 'usage'; usage: Usage }
  | { type: 'event'; event: unknown }
  | { type: 'error'; message: string };

/** Child side: answers 'mark' and 'stop' with CPU and memory figures; `onStop` closes the engine. */
export function serveUsage(onStop: () => Promise<void>, onStart?: (args: unknown) => void): void {
  let cpu = process.cpuUsage();
  let wall = Date.now();
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  process.on('message', (m: ToChild) => {
    if (m.type === 'mark') {
      cpu = process.cpuUsage();
      wall = Date.now();
      loop.reset();
    } else if (m.type === 'start') onStart?.(m.args);
    else if (m.type === 'stop') {
      const d = process.cpuUsage(cpu);
      const usage: Usage = {
        cpuMs: (d.user + d.system) / 1000,
        wallMs: Date.now() - wall,
        peakRssMb: process.resourceUsage().maxRSS / 1024,
        loopDelayP99Ms: loop.percentile(99) / 1e6,
        loopDelayMaxMs: loop.max / 1e6,
      };
      void onStop()
        .catch(() => undefined)
        .finally(() => process.send?.({ type: 'usage', usage } satisfies FromChild, () => process.exit(0)));
    }
  });
}

export function send(m: FromChild): void {
  process.send?.(m);
}
