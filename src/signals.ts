/**
 * Stopping on SIGINT/SIGTERM — also when the signal was sent to npm.
 *
 * Why a worker under `npm start` or `npx onceflow run|worker` was orphaned (issue 38): npm runs a
 * script or an npx command as `sh -c '<command>'`, and /bin/sh on Debian (dash 0.5.12) forks the
 * command instead of exec'ing it, so the tree is npm → sh → node. On SIGINT/SIGTERM npm
 * (@npmcli/run-script's signal-manager) signals its own child only — the shell. SIGTERM kills
 * the shell without passing it on: npm sees its child killed, kills itself with the same signal
 * (exit 143), and node, reparented to init, keeps processing. SIGINT the shell catches (dash
 * does in `-c` mode) and holds until its child exits — so it never stops. Neither
 * bin/onceflow.js (it runs the CLI in its own process), the transforms loader (tsx registers
 * in-process) nor onceflow's handlers start a process of their own: the signal never reached
 * node. npx always runs its command through that shell, so a process npm started watches the
 * processes above it (stopWithParent) and stops as a signal sent to it directly stops it. A
 * start script that says `exec onceflow …` has no shell in between: npm then signals node
 * itself and waits until it has stopped.
 */
import { readFileSync } from 'node:fs';
import { npmLifecycleEvent } from './config';

export const STOP_SIGNALS = ['SIGINT', 'SIGTERM'] as const;

/** Calls `stop` once, on the first SIGINT or SIGTERM; returns a function that stops listening. */
export function onStopSignal(stop: (signal: NodeJS.Signals) => void): () => void {
  const off = () => {
    for (const s of STOP_SIGNALS) process.off(s, handler);
  };
  const handler = (signal: NodeJS.Signals) => {
    off();
    stop(signal);
  };
  for (const s of STOP_SIGNALS) process.on(s, handler);
  return off;
}

/** Shells that npm may run a script with (`sh -c`); a shell between npm and onceflow is watched. */
const SHELL = /^(sh|dash|bash|ash|busybox|zsh)$/;

interface Proc {
  ppid: number;
  comm: string;
  /** times the process went to sleep of its own accord, e.g. in wait(); a blocked shell wakes only for a signal */
  wakes: number;
}

function proc(pid: number): Proc | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return {
      ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]),
      comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
      wakes: Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(status)?.[1] ?? 0),
    };
  } catch {
    return undefined;
  }
}

/**
 * When npm started this process (startedByNpm: npm_lifecycle_event is set, for scripts and
 * npx alike), stops it (a signal to itself) once what npm was told can no longer reach it (see above): its parent is
 * gone (the shell died of SIGTERM: SIGTERM), or, with a shell between npm and this process, npm is
 * gone (killed: SIGTERM) or the shell woke up (SIGINT: a shell asleep in wait() for its only
 * child wakes only for a signal it catches, and in `sh -c` mode that is SIGINT alone). A process
 * started otherwise — e.g. `nohup onceflow worker &` — outlives its parent on purpose and is left
 * alone. Linux only (it reads /proc); elsewhere a no-op.
 */
export function stopWithParent(startedByNpm = npmLifecycleEvent() !== undefined, everyMs = 250): () => void {
  const self = startedByNpm ? proc(process.pid) : undefined;
  const parent = self ? proc(self.ppid) : undefined;
  if (!self || !parent) return () => undefined;
  const shell = SHELL.test(parent.comm);
  const timer = setInterval(() => {
    const now = proc(self.ppid);
    const stop =
      (proc(process.pid)?.ppid ?? self.ppid) !== self.ppid || !now
        ? 'SIGTERM'
        : shell && now.ppid !== parent.ppid
          ? 'SIGTERM'
          : shell && now.wakes !== parent.wakes
            ? 'SIGINT'
            : undefined;
    if (!stop) return;
    clearInterval(timer);
    process.kill(process.pid, stop);
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
