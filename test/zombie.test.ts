/**
 * Zombie attempts on the real services: a worker process frozen (SIGSTOP, as a GC pause or a
 * suspended VM would) inside a prepare until its activity timed out, thawed after another
 * worker's attempt was decided. Before the xids carried fencing tokens, the thawed attempt
 * rolled back every prepared branch of the epoch — the decided one included — and prepared its
 * own, whose ledger-row lock then blocked the MySQL redo forever: the partition never
 * committed again. Now it may roll back only older attempts' branches; the partition must
 * commit again within a bound, exactly once.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { Faults, parseFaults } from '../src/faults';
import { createOnceflowWorker } from '../src/worker';
import { openDeps, quietRuntime, spawnWorker, waitUntil, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/** After the thaw, the partition must have drained within this bound. */
const RECOVERY_BOUND_MS = 90_000;

test('a prepare attempt frozen past its timeout and thawed after the retry was decided does not wedge the partition', { timeout: 300_000 }, async () => {
  const s = await prepareScenario(deps, { prefix: 'zombie', records: 600, partitions: 1, epoch: { maxRecords: 100, maxWaitMs: 500 } });
  const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '';
  // Worker A: epoch 2's first attempt fails, its second freezes at its very start (before the
  // retry's clean-up of older branches) — for longer than the test will ever wait.
  const frozen = spawnWorker(s.taskQueue, {
    ONCEFLOW_WORKFLOW_BUNDLE: codePath,
    ONCEFLOW_FAULTS: 'prepare.start@epoch=2@partition=0@attempt=1:throw,prepare.start@epoch=2@partition=0@attempt=2:freeze=240000',
  });
  let healthy: Awaited<ReturnType<typeof createOnceflowWorker>> | undefined;
  let running: Promise<void> | undefined;
  try {
    const handle = await start(deps, s);
    await waitUntil('worker A to freeze in prepare(epoch 2) attempt 2', async () => /freeze=240000 at prepare\.start epoch=2/.test(frozen.stderrText), 120_000).catch((e) => {
      throw new Error(`${(e as Error).message}; worker A's stderr:\n${frozen.stderrText}`);
    });
    // Worker B takes over; it holds epoch 2's XA COMMIT back for 20 s, the window in which the
    // decided branch is prepared and the zombie wakes.
    const stallSeen: string[] = [];
    const events: unknown[] = [];
    healthy = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      worker: { workflowBundle: { codePath } },
      faults: new Faults(parseFaults('commit.mysql@epoch=2@partition=0:stall=20000')),
      observe: (e) => {
        if (e.kind === 'prepared' && e.epoch === 2) stallSeen.push('prepared');
        if (e.kind === 'redo' || e.kind === 'rolled-back' || e.kind === 'retry') events.push(e);
      },
    });
    running = healthy.run();
    await waitUntil('another attempt of epoch 2 to be prepared on worker B (the decision)', async () => stallSeen.length > 0, 150_000);
    // Thaw the zombie while the decided branch awaits its XA COMMIT.
    await new Promise((r) => setTimeout(r, 2000));
    frozen.kill('SIGCONT');
    const thawedAt = Date.now();
    await waitUntil('the zombie to run on', async () => /thawed at prepare\.start epoch=2/.test(frozen.stderrText), 10_000);
    const [result] = await Promise.race([
      drainAndWait(deps, s, handle),
      new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`partition 0 did not drain within ${RECOVERY_BOUND_MS} ms of the thaw: wedged`)), RECOVERY_BOUND_MS)),
    ]);
    assert.ok(result);
    assert.ok(Date.now() - thawedAt < RECOVERY_BOUND_MS);
    const report = await verify(deps, s);
    assert.ok(report.ok, `${failedChecks(report)}\nworker A:\n${frozen.stderrText}`);
    assert.equal(report.totals.sourceRecords, 600);
    if (process.env.ONCEFLOW_TEST_VERBOSE) process.stderr.write(`worker A:\n${frozen.stderrText}\nworker B: ${JSON.stringify(events)}\n`);
  } finally {
    frozen.kill('SIGCONT');
    frozen.kill('SIGTERM');
    await frozen.exited;
    healthy?.shutdown();
    await running;
  }
});
