/**
 * The benchmark runs the engine under test (an onceflow worker, or the at-least-once baseline)
 * in a child process so its CPU time and peak memory are its own. Parent and child talk over
 * Node's IPC channel with these messages.
 */
import { readdirSync, readFileSync } from 'node:fs';
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
  /** The CPU time split by thread (absent in results from before it, and off Linux). */
  threads?: ThreadCpu;
}

/**
 * CPU ms since the last 'mark' by thread: the main JS thread (the event loop: activities, kafkajs,
 * mysql2), the Temporal core SDK's Rust threads (named tokio-runtime-w: polling, gRPC, the
 * workflow state machines), and every other thread (Node does not name them: the workflow
 * thread(s), V8's GC and compiler helpers, libuv's pool), largest first.
 */
export interface ThreadCpu {
  main: number;
  core: number;
  others: number[];
}

/** CPU ms (utime + stime; Linux counts them in clock ticks of 10 ms) of one /proc/<pid>[/task/<tid>]/stat line. */
export function statCpuMs(stat: string): number {
  // the fields after the parenthesised name start at state (the 3rd field); utime and stime are the 14th and 15th
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** CPU ms per live thread of this process (Linux /proc, 10 ms clock ticks), by tid. */
export function threadTimes(): Map<string, { core: boolean; ms: number }> {
  const out = new Map<string, { core: boolean; ms: number }>();
  let tids: string[];
  try {
    tids = readdirSync('/proc/self/task');
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      out.set(tid, { core: name.startsWith('tokio'), ms: statCpuMs(stat) });
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out;
}

export function threadsSince(from: Map<string, { core: boolean; ms: number }>): ThreadCpu | undefined {
  const now = threadTimes();
  if (!now.size) return undefined;
  const split: ThreadCpu = { main: 0, core: 0, others: [] };
  for (const [tid, t] of now) {
    const ms = t.ms - (from.get(tid)?.ms ?? 0);
    if (tid === String(process.pid)) split.main = ms;
    else if (t.core) split.core += ms;
    else if (ms > 0) split.others.push(ms);
  }
  split.others.sort((a, b) => b - a);
  return split;
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
  let threads = threadTimes();
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  process.on('message', (m: ToChild) => {
    if (m.type === 'mark') {
      cpu = process.cpuUsage();
      wall = Date.now();
      threads = threadTimes();
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
        threads: threadsSince(threads),
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
