/**
 * Zombie attempts on the real services: a worker process frozen (SIGSTOP, as a GC pause or a
 * suspended VM would) inside a prepare until its activity timed out, then thawed.
 *
 * Worker A runs with one activity slot: while the frozen attempt holds it, A polls for no other
 * activity task, so every retry runs on worker B and the interleaving is forced, not left to
 * which poller the server picks (with free slots, a frozen worker's open polls take retries too,
 * and which attempt goes stale varies from run to run).
 *
 * The first test is issue 13's wedge: a retry (attempt 2) frozen before it cleans up older
 * branches, thawed once attempt 3 on B was prepared and decided and waits for its XA COMMIT.
 * Before xids carried fencing tokens (bd018ed), the thawed attempt rolled back the decided branch
 * and prepared its own, whose ledger row lock then blocked the decided epoch's MySQL redo forever.
 * The second freezes right after XA PREPARE (the branch's session open, its locks held) and thaws
 * once a retry started. Both require the partition to drain within a bound, exactly once.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { test, before, after } from 'node:test';
import { temporal } from '@temporalio/proto';
import assert from 'node:assert/strict';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { createOnceflowWorker } from '../src/worker';
import type { ObservedEvent } from '../src/activities/observe';
import { partitionWorkflowId } from '../src/spec';
import {
  assertFired,
  faultFired,
  faultLine,
  openDeps,
  quietRuntime,
  recordedFaults,
  spawnWorker,
  waitUntil,
  type Deps,
} from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify, type Scenario } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/** After the thaw, the partition must have drained within this bound. */
const RECOVERY_BOUND_MS = 90_000;

/** Worker B, in this process: the second worker of a deployment, collecting recovery events. */
function workerB(
  s: Scenario,
  events: unknown[],
  faults: ReturnType<typeof recordedFaults>['faults'] | undefined,
  observe?: (e: ObservedEvent) => void,
) {
  return createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: compareTransforms(),
    worker: { workflowBundle: { codePath: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '' } },
    ...(faults ? { faults } : {}),
    observe: (e) => {
      observe?.(e);
      if (e.kind === 'redo' || e.kind === 'rolled-back' || e.kind === 'retry') events.push(e);
    },
  });
}

/**
 * Thaws worker A and requires the pipeline to drain within RECOVERY_BOUND_MS, the frozen attempt
 * to have run on after the thaw (the zombie), and verify to pass with every record once.
 */
async function thawAndRecover(
  s: Scenario,
  handle: Awaited<ReturnType<typeof start>>,
  frozen: ReturnType<typeof spawnWorker>,
  thawed: RegExp,
  events: unknown[],
): Promise<void> {
  frozen.kill('SIGCONT');
  const thawedAt = Date.now();
  const [result] = await Promise.race([
    drainAndWait(deps, s, handle),
    // Unref'd: a drain that won leaves no timer holding the test process open.
    sleep(RECOVERY_BOUND_MS, undefined, { ref: false }).then((): never => {
      throw new Error(`partition 0 did not drain within ${RECOVERY_BOUND_MS} ms of the thaw: wedged`);
    }),
  ]);
  assert.ok(result);
  assert.ok(Date.now() - thawedAt < RECOVERY_BOUND_MS);
  assertFired(frozen.faultLines, thawed, 'worker A');
  const report = await verify(deps, s);
  assert.ok(report.ok, `${failedChecks(report)}\nworker A:\n${frozen.stderrText}`);
  assert.equal(report.totals.sourceRecords, 600);
  if (process.env.ONCEFLOW_TEST_VERBOSE)
    process.stderr.write(`worker A:\n${frozen.stderrText}\nworker B: ${JSON.stringify(events)}\n`);
}

/** Ends worker A (thawed first, so that it can exit) and worker B, whatever the test got to. */
async function stopBoth(
  frozen: ReturnType<typeof spawnWorker>,
  healthy: { shutdown(): void } | undefined,
  running: Promise<void> | undefined,
): Promise<void> {
  frozen.kill('SIGCONT');
  frozen.kill('SIGTERM');
  await frozen.exited;
  healthy?.shutdown();
  await running;
}

test(
  'a prepare attempt frozen past its timeout and thawed after the retry was decided does not wedge the partition',
  { timeout: 300_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'zombie',
      records: 600,
      partitions: 1,
      epoch: { maxRecords: 100, maxWaitMs: 500 },
    });
    const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '';
    // Worker A: epoch 2's first attempt fails, its second freezes at its very start (before the
    // retry's clean-up of older branches) — for longer than the test will ever wait.
    const frozen = spawnWorker(s.taskQueue, {
      ONCEFLOW_WORKFLOW_BUNDLE: codePath,
      ONCEFLOW_MAX_CONCURRENT_ACTIVITIES: '1',
      ONCEFLOW_FAULTS:
        'prepare.start@epoch=2@partition=0@attempt=1:throw,prepare.start@epoch=2@partition=0@attempt=2:freeze=240000',
    });
    const bFaults = recordedFaults('commit.mysql@epoch=2@partition=0:stall=20000');
    let healthy: Awaited<ReturnType<typeof createOnceflowWorker>> | undefined;
    let running: Promise<void> | undefined;
    try {
      const handle = await start(deps, s);
      // Worker A freezes in prepare(epoch 2) attempt 2.
      await faultFired(frozen, 'freeze=240000', 'prepare.start@epoch=2@partition=0@attempt=2');
      // Attempt 2 exists because attempt 1 failed by its injected throw.
      assertFired(frozen.faultLines, faultLine('throw', 'prepare.start@epoch=2@partition=0@attempt=1'), 'worker A');
      // Worker B takes over; it holds epoch 2's XA COMMIT back for 20 s, the window in which the
      // decided branch is prepared and the zombie wakes.
      const stallSeen: string[] = [];
      const events: unknown[] = [];
      healthy = await workerB(s, events, bFaults.faults, (e) => {
        if (e.kind === 'prepared' && e.epoch === 2) stallSeen.push('prepared');
      });
      running = healthy.run();
      await waitUntil(
        'another attempt of epoch 2 to be prepared on worker B (the decision)',
        async () => stallSeen.length > 0,
        150_000,
      );
      // Thaw the zombie while the decided branch awaits its XA COMMIT: once B's stall (its fault
      // line, told by its Faults) has begun. A fixed 2 s after B's prepare was not enough in
      // a run of 2026-12-06 (the stall began after the thaw; why the commit came late is not
      // known), so the stall itself is waited for.
      await waitUntil(
        "worker B's XA COMMIT of epoch 2 held back (its stall fired)",
        async () => bFaults.firedAt(/stall=20000 at commit\.mysql epoch=2 partition=0 /) !== undefined,
        60_000,
      );
      await new Promise((r) => setTimeout(r, 1000));
      await thawAndRecover(s, handle, frozen, /thawed at prepare\.start epoch=2/, events);
    } finally {
      await stopBoth(frozen, healthy, running);
    }
  },
);

test(
  'frozen at prepare.xa-prepared until the attempt times out, thawed after the retry started: the partition commits again within the bound, exactly once',
  { timeout: 300_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'zombie-xa',
      records: 600,
      partitions: 1,
      epoch: { maxRecords: 100, maxWaitMs: 500 },
    });
    const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '';
    // Worker A alone: epoch 2's first attempt prepares its branch (its ledger row locked, its
    // session still open) and freezes right after XA PREPARE, for longer than the test waits.
    const frozen = spawnWorker(s.taskQueue, {
      ONCEFLOW_WORKFLOW_BUNDLE: codePath,
      ONCEFLOW_MAX_CONCURRENT_ACTIVITIES: '1',
      ONCEFLOW_FAULTS: 'prepare.xa-prepared@epoch=2@partition=0@attempt=1:freeze=400000',
    });
    let healthy: Awaited<ReturnType<typeof createOnceflowWorker>> | undefined;
    let running: Promise<void> | undefined;
    try {
      const handle = await start(deps, s);
      await faultFired(frozen, 'freeze=400000', 'prepare.xa-prepared@epoch=2@partition=0');
      // Worker B joins, as the second worker of a deployment would.
      const events: unknown[] = [];
      healthy = await workerB(s, events, undefined);
      running = healthy.run();
      // The frozen attempt times out (heartbeat timeout) and a retry starts on B (A's one slot is
      // taken); the frozen branch's locks block it until A thaws.
      const partition = deps.client.workflow.getHandle(partitionWorkflowId(s.spec.name, 0));
      let pending: unknown = [];
      await waitUntil(
        'a retry of prepare(epoch 2) to start',
        async () => {
          const activities = (await partition.describe()).raw.pendingActivities ?? [];
          pending = activities.map((a) => ({
            type: a.activityType?.name,
            attempt: a.attempt,
            state: a.state,
            lastFailure: a.lastFailure?.message,
          }));
          // Epoch 2 is prepared by advanceMembers (with epoch 1's commit), or alone by prepareMembers.
          const preparing = (name?: string | null) => name === 'prepareMembers' || name === 'advanceMembers';
          return activities.some(
            (a) =>
              preparing(a.activityType?.name) &&
              (a.attempt ?? 0) >= 2 &&
              a.state === temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
          );
        },
        120_000,
      ).catch((e) => {
        throw new Error(`${(e as Error).message}; pending activities: ${JSON.stringify(pending)}`);
      });
      await thawAndRecover(s, handle, frozen, /thawed at prepare\.xa-prepared epoch=2/, events);
    } finally {
      await stopBoth(frozen, healthy, running);
    }
  },
);
