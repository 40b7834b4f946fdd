/**
 * Liveness with a frozen worker (a long GC pause, a suspended VM): while a healthy worker polls
 * the task queue, no partition goes without progress for longer than LIVENESS_BOUND_MS, however
 * long the freeze. Worker A runs alone until it freezes (SIGSTOP) in the middle of an epoch
 * activity at a protocol step; worker B joins, as the second worker of a deployment would; every
 * partition's committed epochs (its ledger rows) are sampled through the freeze, and the longest
 * time any partition went without a new committed epoch is the measure. Then A thaws (a zombie
 * now), the pipeline drains, and verify must find every record exactly once.
 *
 * What bounds it (docs/deploy.md §7.3): the frozen attempt's heartbeat timeout (10 s), and the
 * polls A had open when it froze — the Temporal server hands tasks to them until they expire
 * (matching.longPollExpirationInterval: 60 s by default, 10 s on the stack scripts/services.sh
 * starts); a stale attempt that wakes never holds the current one for a long MySQL lock wait
 * (staged writes: a 2 s lock-wait timeout).
 *
 * `npm test` runs one step with a 75 s freeze (past the server's default poll expiry, which is
 * what it measures); ONCEFLOW_LIVENESS_POINTS=all ONCEFLOW_LIVENESS_FREEZE_MS=130000 runs every
 * step with the 130 s (`npm run liveness`).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FaultPoint } from '../src/faults';
import { lastLedgerRow } from '../src/mysql/ledger';
import { createOnceflowWorker } from '../src/worker';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { faultFired, openDeps, quietRuntime, spawnWorker, waitUntil, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify } from './support/pipeline';

/** The longest a partition may go without a committed epoch while a healthy worker polls. */
const LIVENESS_BOUND_MS = 20_000;
const FREEZE_MS = Number(process.env.ONCEFLOW_LIVENESS_FREEZE_MS ?? 75_000);
const STEPS: FaultPoint[] = [
  'prepare.start',
  'prepare.kafka-sent',
  'prepare.xa-prepared',
  'commit.before',
  'commit.between',
  'commit.mysql-committed',
  'commit.mysql',
];
const points: FaultPoint[] =
  process.env.ONCEFLOW_LIVENESS_POINTS === 'all'
    ? STEPS
    : ((process.env.ONCEFLOW_LIVENESS_POINTS?.split(',') as FaultPoint[] | undefined) ?? ['commit.before']);
const PARTITIONS = 2;
const RECORDS = 40_000;

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/** Samples each partition's last committed epoch every 200 ms from `from` for `ms`; the longest time any went without a new one (ending early for a partition that caught up with the source). */
async function longestStall(
  pipeline: string,
  from: number,
  ms: number,
  caughtUp: (p: number, end: number) => boolean,
): Promise<{ partition: number; gapMs: number; at: number }[]> {
  const last = new Map<number, { epoch: number; at: number }>();
  const worst = Array.from({ length: PARTITIONS }, (_, p) => ({ partition: p, gapMs: 0, at: from }));
  const done = new Set<number>();
  for (let now = Date.now(); now < from + ms && done.size < PARTITIONS; now = Date.now()) {
    for (let p = 0; p < PARTITIONS; p++) {
      if (done.has(p)) continue;
      const row = await lastLedgerRow(deps.pool, pipeline, p);
      const seen = last.get(p) ?? { epoch: row?.epoch ?? -1, at: from };
      if (row && row.epoch !== seen.epoch) last.set(p, { epoch: row.epoch, at: now });
      else last.set(p, seen);
      const gap = now - last.get(p)!.at;
      if (gap > worst[p]!.gapMs) worst[p] = { partition: p, gapMs: gap, at: last.get(p)!.at };
      if (row && caughtUp(p, row.end)) done.add(p);
    }
    await sleep(200);
  }
  return worst;
}

for (const point of points) {
  test(
    `a worker frozen ${FREEZE_MS / 1000} s at ${point}: while another worker polls, no partition goes ${LIVENESS_BOUND_MS / 1000} s without a committed epoch; exactly once after the thaw`,
    { timeout: FREEZE_MS + 240_000 },
    async () => {
      const s = await prepareScenario(deps, {
        prefix: `live-${STEPS.indexOf(point)}`,
        records: RECORDS,
        partitions: PARTITIONS,
        epoch: { maxRecords: 20, maxWaitMs: 200 },
      });
      const epoch = 4;
      const frozen = spawnWorker(s.taskQueue, {
        ONCEFLOW_WORKFLOW_BUNDLE: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '',
        ONCEFLOW_FAULTS: `${point}@epoch=${epoch}@partition=0@attempt=1:freeze=${FREEZE_MS}`,
      });
      let healthy: Awaited<ReturnType<typeof createOnceflowWorker>> | undefined;
      let running: Promise<void> | undefined;
      try {
        const handle = await start(deps, s);
        await faultFired(frozen, `freeze=${FREEZE_MS}`, `${point}@epoch=${epoch}@partition=0`);
        const frozenAt = Date.now();
        healthy = await createOnceflowWorker({
          settings: deps.settings,
          taskQueue: s.taskQueue,
          transforms: compareTransforms(),
          worker: { workflowBundle: { codePath: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '' } },
        });
        running = healthy.run();
        const perPartition = RECORDS / PARTITIONS;
        const worst = await longestStall(s.spec.name, frozenAt, FREEZE_MS - 2000, (_p, end) => end >= perPartition);
        const report = worst
          .map(
            (w) =>
              `partition ${w.partition}: ${(w.gapMs / 1000).toFixed(1)} s without a committed epoch from +${((w.at - frozenAt) / 1000).toFixed(1)} s`,
          )
          .join('; ');
        process.stdout.write(`# liveness ${point}, freeze ${FREEZE_MS / 1000} s: ${report}\n`);
        assert.ok(
          worst.every((w) => w.gapMs <= LIVENESS_BOUND_MS),
          `longest no-progress time over ${LIVENESS_BOUND_MS / 1000} s while worker A was frozen at ${point}: ${report}`,
        );
        await waitUntil(
          'worker A to thaw',
          async () => frozen.faultLines.some((l) => l.startsWith('[faults] thawed at')),
          FREEZE_MS + 30_000,
        );
        await drainAndWait(deps, s, handle);
        const verified = await verify(deps, s);
        assert.ok(verified.ok, failedChecks(verified));
        assert.equal(verified.totals.sourceRecords, RECORDS);
      } finally {
        frozen.kill('SIGCONT');
        frozen.kill('SIGTERM');
        await frozen.exited;
        healthy?.shutdown();
        await running;
      }
    },
  );
}
