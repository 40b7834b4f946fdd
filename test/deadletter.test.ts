/**
 * The dead-letter budget on the real services (docs/design.md §1.1): a transform that fails on
 * every record, or writes a row for a table the pipeline does not declare, halts its partition
 * before anything of the epoch is written; the error names the record and shows in `status`;
 * after the fix a new start of the pipeline resumes from the ledger, exactly once. Within the
 * budget, poison records are dead-lettered and verify counts them per reason; above the run's
 * budget verify fails.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RowDataPacket } from 'mysql2/promise';
import type { ObservedEvent } from '../src/activities/observe';
import { pipelineStatus } from '../src/cli/status';
import { cli } from './support/cli';
import { deadLetterLine, printReport } from '../src/cli/report';
import { ISOLATION } from '../src/kafka/internals';
import { lastLedgerRow } from '../src/mysql/ledger';
import { quoteIdent } from '../src/mysql/sink';
import { TransformRegistry, type Transform } from '../src/transforms/registry';
import { readAll, verifyPipeline } from '../src/verify';
import { createOnceflowWorker } from '../src/worker';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { compareTransform } from '../examples/flink-compare/transform';
import { controlPipeline } from '../src/client';
import { pipelineWorkflowId } from '../src/spec';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { PartitionResult } from '../src/workflows/partition';
import { bundle, openDeps, quietRuntime, waitUntil, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify, type Scenario } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/** A worker on the scenario's task queue whose 'flink-compare' is `transform`; returns a stop function. */
async function worker(s: Scenario, transform: Transform, events: ObservedEvent[] = []) {
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: new TransformRegistry().register('flink-compare', transform),
    observe: (e) => void events.push(e),
    worker: { workflowBundle: bundle() },
  });
  const running = w.run();
  return async () => {
    w.shutdown();
    await running;
  };
}

/**
 * The fix: a worker whose 'flink-compare' is the working transform; `resume` starts the pipeline
 * again and drains it. Then every partition drained, and verify finds 300 outputs exactly once and no dead letter.
 */
async function resumeFixed(s: Scenario, resume: () => Promise<PartitionResult[]>) {
  const stop = await worker(s, compareTransform);
  try {
    assert.deepEqual(
      (await resume()).map((r) => r.reason),
      ['drained', 'drained'],
    );
  } finally {
    await stop();
  }
  const report = await verify(deps, s);
  assert.ok(report.ok, failedChecks(report));
  assert.equal(report.totals.outputs, 300);
  assert.equal(report.deadLetters.total, 0);
}

/** Records visible to read_committed readers in every partition of `topic`. */
async function committedIn(topic: string, partitions: number[]) {
  let n = 0;
  for (const p of partitions) n += (await readAll(deps.cluster, topic, p, ISOLATION.READ_COMMITTED)).length;
  return n;
}

async function tableRows(s: Scenario): Promise<number> {
  const [rows] = await deps.pool.query<RowDataPacket[]>(
    `SELECT COUNT(*) AS n FROM ${quoteIdent(s.spec.mysqlSink.tables[0]!.name)}`,
  );
  return Number(rows[0]!.n);
}

test(
  'a transform that throws on every record halts at its first epoch (a partition group), nothing of it committed; the fixed transform resumes exactly once',
  { timeout: 120_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'dl-throws', records: 300, partitions: 2, parallelism: 1 });
    const events: ObservedEvent[] = [];
    const stop = await worker(
      s,
      {
        map: () => {
          throw new Error('bug: cannot read field indicate');
        },
      },
      events,
    );
    try {
      await assert.rejects(drainAndWait(deps, s, await start(deps, s)), (e: Error) => {
        assert.match(String((e as { cause?: Error }).cause?.message ?? e.message), /halted at group 0 epoch 0/);
        return true;
      });
    } finally {
      await stop();
    }
    // The halt: named by `onceflow status` for both members of the group, with the first failing record.
    const status = await cli('status', s.spec.name, '--json');
    assert.equal(status.code, 0, status.out + status.err);
    const rows = (JSON.parse(status.out) as { partitions: { phase: string; lastError: string | null }[] }).partitions;
    assert.equal(rows.length, s.partitions);
    for (const r of rows) {
      assert.equal(r.phase, 'failed', JSON.stringify(r));
      assert.match(
        String(r.lastError),
        /transform 'flink-compare' failed on (\d+) of \1 records, over the dead-letter budget of 1 .*First failing record: topic '[^']+', partition \d, offset 0 — transform-error: bug: cannot read field indicate/,
      );
      assert.match(String(r.lastError), /start the pipeline again/);
    }
    assert.deepEqual(
      events.filter((e) => e.kind === 'halted').map((e) => e.kind === 'halted' && e.cause),
      ['dead-letter-budget'],
    );
    // Nothing of the epoch: no output, dead letter or marker for read_committed readers, no row, no ledger row.
    assert.equal(await committedIn(s.spec.kafkaSink.topic, [0, 1]), 0);
    assert.equal(await committedIn(s.spec.deadLetterTopic, [0, 1]), 0);
    assert.equal(await committedIn(s.spec.progressTopic, [0, 1]), 0);
    assert.equal(await tableRows(s), 0);
    for (const p of [0, 1]) assert.equal(await lastLedgerRow(deps.pool, s.spec.name, p), null);

    // The pipeline has ended: started again, it is a new run whose group reconciles from the ledger.
    await resumeFixed(s, async () => drainAndWait(deps, s, await start(deps, s)));
  },
);

test(
  'a row for a table the pipeline does not declare halts its partition, never a dead letter; a start of the running pipeline resumes it',
  { timeout: 120_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'dl-table', records: 300, partitions: 2 });
    const [inTopic, declared] = [s.spec.source.topic, s.spec.mysqlSink.tables[0]!.name];
    // Source partition 0's record at offset 5 writes to a table nobody declared; everything else is the real transform.
    const broken: Transform = {
      map: (r, ctx) =>
        r.partition === 0 && r.offset === 5
          ? { mysql: [{ table: 'audit_log', values: { id: 1 } }] }
          : compareTransform.map(r, ctx),
    };
    const stop = await worker(s, broken);
    let stopped = false;
    try {
      await start(deps, s);
      const halted = await waitUntil(
        'partition 0 halted',
        async () =>
          (await pipelineStatus(deps, s.spec, s.partitions)).find((r) => r.partition === 0 && r.phase === 'failed'),
        60_000,
      );
      assert.match(
        String(halted.lastError),
        new RegExp(
          `wrote a row for table 'audit_log', which the pipeline does not declare \\(declared: ${declared}\\); record topic '${inTopic.replace(/\./g, '\\.')}', partition 0, offset 5`,
        ),
      );
      // Partition 1 goes on; pause it so that no epoch is in flight when the worker changes.
      await waitUntil(
        'partition 1 committed its input',
        async () => (await lastLedgerRow(deps.pool, s.spec.name, 1))?.end === 150,
        60_000,
      );
      await controlPipeline(deps.client, s.spec.name, 'pause');
      await waitUntil(
        'partition 1 paused',
        async () =>
          (await pipelineStatus(deps, s.spec, s.partitions)).find((r) => r.partition === 1)?.phase === 'paused',
        30_000,
      );
      assert.equal(await lastLedgerRow(deps.pool, s.spec.name, 0), null, 'nothing of partition 0 committed');
      assert.equal(await committedIn(s.spec.kafkaSink.topic, [0]), 0, "no output of partition 0's epoch");
      assert.equal(await committedIn(s.spec.deadLetterTopic, [0, 1]), 0, 'no dead letter');
      await stop();
      stopped = true;
    } finally {
      if (!stopped) await stop();
    }
    await resumeFixed(s, async () => {
      // The pipeline still runs (partition 1 is paused): its start restarts the halted partition, which starts paused like the rest.
      const handle = await start(deps, s);
      await waitUntil(
        'partition 0 restarted',
        async () =>
          (await pipelineStatus(deps, s.spec, s.partitions)).find((r) => r.partition === 0)?.phase === 'paused',
        30_000,
      );
      await controlPipeline(deps.client, s.spec.name, 'resume');
      return drainAndWait(deps, s, handle);
    });
    // The pipeline run that took the restart signal replays with the current code;
    // ONCEFLOW_RECORD_HISTORIES=1 keeps it for test/replay.test.ts.
    const history = await deps.client.workflow.getHandle(pipelineWorkflowId(s.spec.name)).fetchHistory();
    assert.match(JSON.stringify(history), /restartHalted/, 'the pipeline workflow received the restart signal');
    await Worker.runReplayHistory({ workflowBundle: bundle() }, history, pipelineWorkflowId(s.spec.name));
    if (process.env.ONCEFLOW_RECORD_HISTORIES)
      writeFileSync(join(__dirname, 'histories', 'pipeline', 'pipeline-restart-halted-0.json'), historyToJSON(history));
  },
);

test(
  'within the budget poison records are dead-lettered and verify counts them per reason; above the run budget verify fails',
  { timeout: 120_000 },
  async () => {
    // One poison in 50, all on source partition 1 (odd input indexes): up to 4 in an epoch of 100, 6 in all.
    const s = await prepareScenario(deps, {
      prefix: 'dl-within',
      records: 300,
      partitions: 2,
      poisonEvery: 50,
      deadLetter: { maxRatio: 0.05 },
    });
    const stop = await worker(s, compareTransform);
    try {
      await drainAndWait(deps, s, await start(deps, s));
    } finally {
      await stop();
    }
    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(s.input.poison, 6);
    assert.deepEqual(report.deadLetters, { total: 6, byReason: { 'transform-error': 6 }, allowed: 15, maxRatio: 0.05 });
    let printed = '';
    printReport(report, (t) => (printed += t));
    assert.match(printed, /^dead letters: 6 \(budget 15\) — transform-error 6$/m);
    assert.match(printed, /PASS {2}dead letters within the budget: 6 of 300 source records, at most 15 allowed/);
    assert.match(printed, /RESULT: exactly once — every check passed/);

    // The same run judged by the default budget (1%: 3 of 300): verify fails on that check alone.
    const strict = await verifyPipeline(
      { cluster: deps.cluster, admin: deps.admin, pool: deps.pool, transforms: compareTransforms() },
      { ...s.spec, deadLetter: { maxRatio: 0.01, maxPerEpoch: 100 } },
    );
    assert.equal(strict.ok, false);
    assert.deepEqual(
      strict.checks.filter((c) => !c.ok).map((c) => c.name),
      ['dead letters within the budget'],
    );
    assert.equal(deadLetterLine(strict.deadLetters), 'dead letters: 6 (budget 3) — transform-error 6');
  },
);
