/**
 * Test support: real services only (started by scripts/test.sh through scripts/services.sh).
 * Every test uses fresh topics, tables and task queues, so tests never see each other's data.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadSettings } from '../../src/config';
import { openConnections, type Connections } from '../../src/connections';
import { Faults, parseFaults } from '../../src/faults';

let runtimeInstalled = false;
export function quietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
}

export const uniqueName = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;

export type Deps = Connections;

export const openDeps = (): Promise<Deps> => openConnections(loadSettings(), 'onceflow-test');

const ROOT = join(__dirname, '..', '..');

/**
 * A worker in its own process (so a test can SIGKILL it), with optional fault injection: the
 * command a user runs, `onceflow worker --transforms <module> --task-queue <queue>` (the bin, over
 * the dist/ that scripts/test.sh builds). `stderrText` is the tail of its stderr for messages (the
 * last 10,000 characters once it passes 20,000), `fullStderr` all of it (for a scan for secrets),
 * `faultLines` every `[faults]` line (src/faults.ts), so a test can check that its fault fired
 * however much the worker said after it.
 */
export function spawnWorker(
  taskQueue: string,
  env: Record<string, string> = {},
): ChildProcess & { exited: Promise<number | null>; stderrText: string; fullStderr: string; faultLines: string[] } {
  const child = spawn(
    process.execPath,
    [
      join(ROOT, 'bin', 'onceflow.js'),
      'worker',
      '--transforms',
      join(ROOT, 'examples', 'flink-compare', 'transforms.ts'),
      '--task-queue',
      taskQueue,
    ],
    { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let full = '';
  let tail = '';
  let partial = '';
  const faultLines: string[] = [];
  child.stderr?.on('data', (d: Buffer) => {
    const text = d.toString();
    full += text;
    tail += text;
    if (tail.length > 20000) tail = tail.slice(-10000);
    const lines = (partial + text).split('\n');
    partial = lines.pop()!;
    faultLines.push(...lines.filter((l) => l.startsWith('[faults]')));
  });
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? (signal ? -1 : null))),
  );
  // defineProperty, not Object.assign: assign would copy the getter's value ('') once.
  return Object.defineProperties(child, {
    exited: { value: exited },
    stderrText: { get: () => tail },
    fullStderr: { get: () => full },
    faultLines: { value: faultLines },
  }) as ChildProcess & {
    exited: Promise<number | null>;
    stderrText: string;
    fullStderr: string;
    faultLines: string[];
  };
}

/**
 * A worker process armed to SIGKILL itself at `fault` (`point@epoch=E@partition=P`); `died()`
 * waits for it to die and requires that it died of that fault, at that point (its fault line).
 */
export function doomedWorker(taskQueue: string, fault: string, env: Record<string, string> = {}) {
  const w = spawnWorker(taskQueue, { ONCEFLOW_FAULTS: `${fault}:crash`, ...env });
  return Object.assign(w, {
    async died(): Promise<void> {
      assert.equal(await w.exited, -1, `the first worker died of SIGKILL at ${fault}; its stderr:\n${w.stderrText}`);
      assertFired(w.faultLines, faultLine('SIGKILL', fault), 'the first worker');
    },
  });
}

/**
 * Faults for a worker in this process (`ONCEFLOW_FAULTS` syntax), with each `[faults]` line they
 * write (`lines`, filled as they fire: keep the array, not a copy) and when (`firedAt`).
 */
export function recordedFaults(rules: string): {
  faults: Faults;
  lines: string[];
  firedAt: (line: RegExp) => number | undefined;
} {
  const lines: string[] = [];
  const at: number[] = [];
  const faults = new Faults(parseFaults(rules), undefined, (line) => {
    lines.push(line);
    at.push(Date.now());
  });
  return { faults, lines, firedAt: (line) => at[lines.findIndex((l) => line.test(l))] };
}

/**
 * Requires that a fault fired where the test says: a `[faults]` line (src/faults.ts:
 * `[faults] <action> at <point> epoch=… partition=… attempt=… pid=…`) matching `line`.
 */
export function assertFired(lines: readonly string[], line: RegExp, whose: string): void {
  assert.ok(
    lines.some((l) => line.test(l)),
    `${whose}: no fault line matching ${line}; its fault lines:\n${lines.join('\n') || '(none)'}`,
  );
}

/** The `[faults]` line of `action` at a fault of ONCEFLOW_FAULTS syntax, `point@epoch=E@partition=P` (conditions in that order). */
export const faultLine = (action: string, fault: string) =>
  new RegExp(`^\\[faults\\] ${action} at ${fault.replace(/\./g, '\\.').replace(/@/g, ' ')} `);

/**
 * Waits until worker process `w` writes the `[faults]` line of `action` at `fault` (faultLine);
 * on a timeout the error carries the worker's stderr.
 */
export async function faultFired(
  w: { faultLines: string[]; stderrText: string },
  action: string,
  fault: string,
  timeoutMs = 120_000,
): Promise<void> {
  const line = faultLine(action, fault);
  await waitUntil(
    `the worker's fault ${action} at ${fault}`,
    async () => w.faultLines.some((l) => line.test(l)),
    timeoutMs,
  ).catch((e: unknown) => {
    throw new Error(`${(e as Error).message}; its stderr:\n${w.stderrText}`);
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitUntil<T>(
  what: string,
  fn: () => Promise<T | undefined | false>,
  timeoutMs: number,
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** The prebuilt workflow bundle of the test run (scripts/test.sh), for workers and replay. */
export const bundle = () => {
  const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  if (!codePath) throw new Error('ONCEFLOW_WORKFLOW_BUNDLE is not set; run the tests with npm test');
  return { codePath };
};

/** Workflow code for a worker or a replay: the prebuilt bundle of the test run if there is one, else src/workflows (bundled on the spot). */
export function workflowCode(): { workflowBundle: { codePath: string } } | { workflowsPath: string } {
  const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  return codePath ? { workflowBundle: { codePath } } : { workflowsPath: require.resolve('../../src/workflows') };
}
