/**
 * SIGTERM and SIGINT as a supervisor sends them — to the npm or npx process it started, not to
 * onceflow's own — stop the worker cleanly and leave no process behind (issue 38: npm exited 143
 * and the worker, reparented to init, kept processing; src/signals.ts says why).
 *
 * A project made by `onceflow init`, with this repository as its `file:` dependency (npm links
 * it) and the scaffold's own `npm install`; its source topic made and fed with `npx onceflow
 * topics create` and `npx onceflow produce`. Then, for `npm start`, `npx onceflow run` and `npx
 * onceflow worker`, each with SIGTERM and SIGINT: once the worker says it polls, the signal goes
 * to npm's pid; within a bound every process of the project is gone (its stderr pipe closes only
 * when the last process holding it has exited, and `ps` lists none), and the worker's shutdown
 * line was printed.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { main } from '../src/cli';
import { pipelineWorkflowId } from '../src/spec';
import { openDeps, uniqueName, type Deps } from './support/env';

const ROOT = join(__dirname, '..');
/** How long a stop may take: the worker finishes its activities in flight (an idle one stops in ~1 s). */
const STOP_BOUND_MS = 30_000;
let deps: Deps;
let home: string;
let dir: string;
let name: string;

/** Processes whose command line names the project directory: onceflow's node process (run as <dir>/node_modules/.bin/onceflow). */
function projectProcesses(): string[] {
  const ps = spawnSync('ps', ['-eo', 'pid,ppid,args'], { encoding: 'utf8' }).stdout;
  return ps.split('\n').filter((l) => l.includes(dir) && !l.includes(' ps -eo'));
}

function npm(args: string[], cwd = dir): { status: number | null; out: string } {
  const r = spawnSync('npm', args, { cwd, encoding: 'utf8', env: process.env, timeout: 180_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

before(async () => {
  deps = await openDeps();
  home = mkdtempSync(join(tmpdir(), 'onceflow-signals-'));
  name = uniqueName('sig');
  dir = join(home, name);
  let said = '';
  const code = await main(['init', dir, '--onceflow', `file:${ROOT}`], {
    stdout: (s) => void (said += s),
    stderr: (s) => void (said += s),
  });
  assert.equal(code, 0, said);
  const install = npm(['install', '--prefer-offline', '--no-audit', '--no-fund']);
  assert.equal(install.status, 0, install.out);
  const topics = npm(['exec', '--', 'onceflow', 'topics', 'create', 'pipeline.yaml', '--partitions', '2']);
  assert.equal(topics.status, 0, topics.out);
  writeFileSync(
    join(dir, 'lines.jsonl'),
    Array.from({ length: 500 }, (_, i) => JSON.stringify(`line ${i} of the signals test`)).join('\n'),
  );
  const produced = npm(['exec', '--', 'onceflow', 'produce', `${name}.input`, '--file', 'lines.jsonl']);
  assert.equal(produced.status, 0, produced.out);
});

after(async () => {
  // A failed test may have left its worker: end those of this project (by pid), then the pipeline.
  for (const line of projectProcesses()) {
    const pid = Number(line.trim().split(/\s+/)[0]);
    if (pid > 1) process.kill(pid, 'SIGKILL');
  }
  await deps?.client.workflow
    .getHandle(pipelineWorkflowId(name))
    .terminate('signals test over')
    .catch(() => undefined);
  await deps?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

const commands: [string, string[], RegExp, RegExp][] = [
  ['npm start', ['start'], /running on task queue/, /worker stopped/],
  [
    'npx onceflow run',
    ['exec', '--', 'onceflow', 'run', 'pipeline.yaml', '--transforms', 'src/transforms.ts'],
    /running on task queue/,
    /worker stopped/,
  ],
  [
    'npx onceflow worker',
    ['exec', '--', 'onceflow', 'worker', '--transforms', 'src/transforms.ts', '--task-queue', 'SIGNALS_TQ'],
    /onceflow worker on task queue/,
    /onceflow worker stopped/,
  ],
];

for (const [what, args, ready, stopped] of commands) {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    test(`${signal} to ${what} stops the worker and leaves no process`, async () => {
      // `npx x` is `npm exec -- x`; the npx script is a node wrapper that calls it in-process.
      const argv = what.startsWith('npx') ? ['npx', ...args.slice(2)] : ['npm', ...args];
      const child = spawn(
        argv[0]!,
        argv.slice(1).map((a) => a.replace('SIGNALS_TQ', name)),
        { cwd: dir, env: process.env, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let output = '';
      for (const s of [child.stdout!, child.stderr!]) s.on('data', (d: Buffer) => void (output += d.toString()));
      // Closed once every process holding the pipes — npm, its shell, onceflow — has exited.
      const closed = new Promise<void>((r) => child.once('close', () => r()));
      const startBy = Date.now() + 90_000;
      while (!ready.test(output)) {
        if (child.exitCode !== null || Date.now() > startBy)
          assert.fail(`${what} did not start its worker:\n${output}`);
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.ok(
        projectProcesses().some((l) => /node .*onceflow/.test(l)),
        `no onceflow process of the project running:\n${projectProcesses().join('\n')}`,
      );
      const sentAt = Date.now();
      process.kill(child.pid!, signal);
      const inTime = await Promise.race([
        closed.then(() => true),
        new Promise<false>((r) => setTimeout(() => r(false), STOP_BOUND_MS).unref()),
      ]);
      const left = projectProcesses();
      assert.ok(
        inTime,
        `${STOP_BOUND_MS / 1000} s after ${signal} to ${what} (pid ${child.pid}), processes still hold its output:\n${left.join('\n')}\n${output}`,
      );
      assert.deepEqual(left, [], `processes of the project left after ${signal} to ${what}:\n${left.join('\n')}`);
      assert.match(output, stopped, `no shutdown line from the worker:\n${output}`);
      process.stderr.write(
        `  ${what}: stopped ${((Date.now() - sentAt) / 1000).toFixed(1)} s after ${signal}, npm exit ${child.exitCode ?? child.signalCode}\n`,
      );
    });
  }
}
