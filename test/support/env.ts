/**
 * Test support: real services only (started by scripts/test.sh through scripts/services.sh).
 * Every test uses fresh topics, tables and task queues, so tests never see each other's data.
 */
import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadSettings } from '../../src/config';
import { openConnections, type Connections } from '../../src/connections';

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

/** A worker in its own process (so a test can SIGKILL it), with optional fault injection. */
export function spawnWorker(
  taskQueue: string,
  env: Record<string, string> = {},
): ChildProcess & { exited: Promise<number | null>; stderrText: string } {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'worker.ts')], {
    cwd: ROOT,
    env: {
      ...process.env,
      ONCEFLOW_TASK_QUEUE: taskQueue,
      ONCEFLOW_TRANSFORMS: join(ROOT, 'examples', 'flink-compare', 'transforms.ts'),
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
    if (stderr.length > 20000) stderr = stderr.slice(-10000);
  });
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? (signal ? -1 : null))),
  );
  // defineProperty, not Object.assign: assign would copy the getter's value ('') once.
  return Object.defineProperties(child, {
    exited: { value: exited },
    stderrText: { get: () => stderr },
  }) as ChildProcess & {
    exited: Promise<number | null>;
    stderrText: string;
  };
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
