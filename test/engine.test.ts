/**
 * The exactly-once engine on the real services: the original scenario, a worker killed
 * between prepare and commit, a broker transaction timeout before commit, a retried epoch
 * that must leave no prepared XA branch behind, a kill between XA COMMIT and the apply of the
 * staged rows, and a lingering prepared branch that must not block other partitions.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import type { RowDataPacket } from 'mysql2/promise';
import { Faults, parseFaults } from '../src/faults';
import { ISOLATION } from '../src/kafka/internals';
import { setTimeout as sleep } from 'node:timers/promises';
import { recoverXids, rollbackXid } from '../src/mysql/branch';
import { lastLedgerRow } from '../src/mysql/ledger';
import { epochGtrid, xidSql } from '../src/mysql/xid';
import { pendingEpochs, STAGE_ROWS_TABLE } from '../src/mysql/stage';
import { partitionWorkflowId } from '../src/spec';
import { SEARCH_ATTRIBUTES } from '../src/search-attributes';
import { readAll } from '../src/verify';
import type { ObservedEvent } from '../src/activities/observe';
import { createOnceflowWorker } from '../src/worker';
import {
  assertFired,
  bundle,
  doomedWorker,
  faultLine,
  openDeps,
  quietRuntime,
  recordedFaults,
  spawnWorker,
  waitUntil,
  type Deps,
} from './support/env';
import { compareTransforms } from '../examples/flink-compare/transforms';
import {
  drainAndWait,
  failedChecks,
  prepareScenario,
  rollBackWhenPrepared,
  runToEnd,
  start,
  verify,
  type Scenario,
} from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/**
 * Replays every run of partition 0's workflow with the current code; with
 * ONCEFLOW_RECORD_HISTORIES=1 also stores them under test/histories/ for the replay tests.
 */
async function replayAll(pipeline: string, label: string): Promise<number> {
  const id = partitionWorkflowId(pipeline, 0);
  let n = 0;
  for await (const run of deps.client.workflow.list({ query: `WorkflowId = '${id}'` })) {
    const history = await deps.client.workflow.getHandle(id, run.runId).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: bundle() }, history, `${id}/${run.runId}`);
    if (process.env.ONCEFLOW_RECORD_HISTORIES) {
      const dir = join(__dirname, 'histories');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `partition-${label}-${n}.json`), historyToJSON(history));
    }
    n++;
  }
  return n;
}

test(
  'the original scenario: failing compare sink, every input exactly once in Kafka and MySQL',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'scenario',
      records: 1200,
      partitions: 3,
      poisonEvery: 300,
      transformOptions: { compareFailAfter: 10, compareFailEveryNthEpoch: 2 },
    });
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      worker: { workflowBundle: bundle() },
    });
    const running = w.run();
    try {
      const handle = await start(deps, s);
      const results = await drainAndWait(deps, s, handle);
      assert.equal(results.length, 3);
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.sourceRecords, 1200);
      assert.equal(report.totals.deadLetters, s.input.poison);
      assert.equal(report.totals.outputs, s.input.events.length);
      // The faults really hit: aborted copies exist for read_uncommitted readers.
      assert.ok(report.totals.abortedCopies > 0, 'the compare sink failed some attempts, leaving aborted copies');
      // The epoch search attribute, held back between epochs while they run, shows each drained partition's last epoch.
      for (const r of results) {
        const d = await deps.client.workflow.getHandle(partitionWorkflowId(s.spec.name, r.partition)).describe();
        assert.deepEqual(
          [r.partition, d.typedSearchAttributes.get(SEARCH_ATTRIBUTES.epoch)],
          [r.partition, r.state.epoch],
        );
      }

      // Replay the recorded history of a partition workflow with the current code.
      await replayAll(s.spec.name, 'compare-sink-retries');
    } finally {
      w.shutdown();
      await running;
    }
  },
);

test(
  'an epoch commits as soon as its decision is in history, on the worker that prepared it, once; an early commit that fails is done by the next activity',
  { timeout: 240_000 },
  async () => {
    // Epoch 2 of each partition: the early commit throws before EndTxn (attempt 1 of the
    // preparing activity, as the fault rule sees it); the activity that commits it in the
    // workflow's order must then commit it (its attempt 1 throws too, its retry commits).
    const fault = 'commit.before@epoch=2@attempt=1:throw';
    const recorded = recordedFaults(fault);
    const s = await prepareScenario(deps, {
      prefix: 'early',
      records: 600,
      partitions: 2,
      epoch: { maxRecords: 50, maxWaitMs: 200 },
    });
    const commits: Extract<ObservedEvent, { kind: 'committed' }>[] = [];
    await runToEnd(deps, s, {
      faults: recorded.faults,
      observe: (e) => void (e.kind === 'committed' && commits.push(e)),
    });
    assertFired(recorded.lines, /throw at commit\.before epoch=2 partition=0 attempt=1/, 'the worker');
    const byEpoch = new Map<string, { early: number; ordered: number }>();
    for (const c of commits) {
      const k = `${c.partition}/${c.epoch}/${c.side}`;
      const n = byEpoch.get(k) ?? { early: 0, ordered: 0 };
      n[c.early ? 'early' : 'ordered']++;
      byEpoch.set(k, n);
    }
    const epochs = await Promise.all([0, 1].map(async (p) => (await lastLedgerRow(deps.pool, s.spec.name, p))!.epoch));
    assert.ok(
      epochs.every((e) => e >= 5),
      `each partition committed 300 records in epochs of at most 50: ${epochs}`,
    );
    for (const [p, last] of epochs.entries())
      for (let e = 0; e <= last; e++)
        for (const side of ['kafka', 'mysql']) {
          const n = byEpoch.get(`${p}/${e}/${side}`);
          if (e === 2) {
            // The early commit's Kafka side threw; its MySQL side, beside it, committed, and each
            // retry of the ordered commit finds it committed (XA NOTA, its ledger row) again.
            if (side === 'kafka') assert.deepEqual(n, { early: 0, ordered: 1 }, `partition ${p} epoch 2 kafka`);
            else assert.equal(n?.early, 1, `partition ${p} epoch 2 mysql: ${JSON.stringify(n)}`);
          } else
            assert.deepEqual(n, { early: 1, ordered: 0 }, `partition ${p} epoch ${e} ${side}: committed once, early`);
        }
  },
);

/**
 * Runs scenario `s` on a worker process that SIGKILLs itself at `fault`, checks it died so,
 * calls `whileDead` (the state the kill left), then drains the pipeline on a second worker
 * process and returns the partition result and the verification.
 */
async function killedThenRecovered(s: Scenario, fault: string, whileDead: () => Promise<void> = async () => undefined) {
  const doomed = doomedWorker(s.taskQueue, fault);
  const handle = await start(deps, s);
  await doomed.died();
  await whileDead();
  const second = spawnWorker(s.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
  try {
    const [result] = await drainAndWait(deps, s, handle);
    assert.ok(result);
    return { result, report: await verify(deps, s) };
  } finally {
    second.kill('SIGTERM');
    await second.exited;
  }
}

test(
  'a worker killed with SIGKILL after prepare and before commit: a new worker process commits, output exactly once',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'kill', records: 400, partitions: 1 });
    const { result, report } = await killedThenRecovered(s, 'commit.before@epoch=1@partition=0');
    // The transaction the dead worker prepared was committed by the new one (no redo needed).
    assert.equal(result.state.redos, 0);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(report.totals.outputs, 400);
  },
);

test(
  'a Kafka transaction aborted by the broker (timeout) before commit is redone; MySQL not doubled',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'timeout',
      records: 300,
      partitions: 1,
      transactionTimeoutMs: 3000,
      epochsPerRun: 2,
    });
    const doomed = doomedWorker(s.taskQueue, 'commit.before@epoch=0@partition=0');
    const handle = await start(deps, s);
    await doomed.died();
    // The commit activity is retried only after its heartbeat timeout (10 s), well past the 3 s
    // transaction timeout: by then the broker has aborted epoch 0's prepared transaction.
    const second = spawnWorker(s.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
    try {
      const [result] = await drainAndWait(deps, s, handle);
      assert.ok(result);
      assert.equal(result.state.redos, 1, 'epoch 0 was redone after the broker aborted it');
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs, 300);
      // Epoch 1 was prepared beside epoch 0's commit, in the same advanceMembers activity; when that
      // commit found epoch 0 aborted, epoch 1 was withdrawn inside the activity (its copy is the
      // second aborted 100) and prepared again after epoch 0's redo: the output above is in
      // source order.
      assert.ok(
        report.totals.abortedCopies >= 200,
        `aborted copies of epochs 0 and 1 visible to read_uncommitted: ${report.totals.abortedCopies}`,
      );
      const id = partitionWorkflowId(s.spec.name, 0);
      const latest = await deps.client.workflow.getHandle(id).fetchHistory();
      const firstRun = latest.events?.[0]?.workflowExecutionStartedEventAttributes?.firstExecutionRunId;
      assert.ok(firstRun);
      const first = historyToJSON(await deps.client.workflow.getHandle(id, firstRun).fetchHistory());
      assert.match(first, /"advanceMembers"/);
      assert.match(first, /"redoMembers"/);
      // Three epochs of 100 plus the final empty poll at two epochs per run: continue-as-new, each run replayable.
      assert.ok((await replayAll(s.spec.name, 'redo-continue-as-new')) >= 2, 'the workflow continued as new');
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  },
);

test(
  'an epoch retried after a failure past XA PREPARE leaves no prepared XA branch behind',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'xaleft', records: 300, partitions: 2 });
    const faults = new Faults(
      parseFaults('prepare.xa-prepared@epoch=0@attempt=1:throw,prepare.xa-prepared@epoch=1@attempt=1:throw'),
    );
    const rolledBack: { partition: number; epoch: number; xid: string }[] = [];
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      faults,
      worker: { workflowBundle: bundle() },
      observe: (e) => void (e.kind === 'rolled-back' && rolledBack.push(e)),
    });
    const running = w.run();
    try {
      const handle = await start(deps, s);
      await drainAndWait(deps, s, handle);
      // Each failed first attempt left a prepared branch, which the retry rolled back: 2 epochs × 2 partitions.
      assert.deepEqual(
        rolledBack.map((e) => `${e.partition}/${e.epoch}`).sort(),
        ['0/0', '0/1', '1/0', '1/1'],
        `rolled back: ${rolledBack.map((e) => e.xid).join(', ')}`,
      );
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.preparedXaBranches, 0);
      assert.equal(report.totals.outputs, 300);
    } finally {
      w.shutdown();
      await running;
    }
  },
);

test(
  'verification fails when an output is duplicated, a row is off, a branch stays prepared or a transaction hangs',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'tamper', records: 200, partitions: 1 });
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      worker: { workflowBundle: bundle() },
    });
    const running = w.run();
    try {
      await drainAndWait(deps, s, await start(deps, s));
    } finally {
      w.shutdown();
      await running;
    }
    assert.ok((await verify(deps, s)).ok);
    const table = s.spec.mysqlSink.tables[0]!.name;

    // 1. a duplicate committed to the output topic
    const [first] = await readAll(deps.cluster, s.spec.kafkaSink.topic, 0, ISOLATION.READ_COMMITTED);
    const producer = deps.kafka.producer({ idempotent: true });
    await producer.connect();
    await producer.send({
      topic: s.spec.kafkaSink.topic,
      messages: [{ key: first!.key, value: first!.value, partition: 0 }],
    });
    // 2. an open transaction on the output partition (holds back the LSO)
    const hanging = deps.kafka.producer({
      transactionalId: `${s.spec.name}-hang`,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await hanging.connect();
    const txn = await hanging.transaction();
    await txn.send({ topic: s.spec.kafkaSink.topic, messages: [{ value: 'uncommitted', partition: 0 }] });
    // 3. a MySQL row changed behind the pipeline's back, 4. a prepared branch of ours
    await deps.pool.query(`UPDATE \`${table}\` SET indicate = indicate + 1 LIMIT 1`);
    const conn = await deps.pool.getConnection();
    const xid = xidSql({ gtrid: epochGtrid(s.spec.name, 0, 999), bqual: 'tamper' });
    await conn.query(`XA START ${xid}`);
    await conn.query(`XA END ${xid}`);
    await conn.query(`XA PREPARE ${xid}`);
    conn.destroy();
    try {
      const r = await verify(deps, s);
      const failed = new Set(r.checks.filter((c) => !c.ok).map((c) => c.name));
      assert.equal(r.ok, false);
      assert.equal(r.totals.duplicates, 1);
      for (const name of [
        'no duplicates (read_committed)',
        'MySQL tables equal the rows applied once',
        'no prepared XA branch left',
        'no transaction holds back the LSO',
      ]) {
        assert.ok(failed.has(name), `the check '${name}' failed as it should; failed: ${[...failed].join(', ')}`);
      }
    } finally {
      await txn.abort();
      await Promise.all([producer.disconnect(), hanging.disconnect()]);
      await waitUntil(
        'the tamper branch to detach',
        async () =>
          (await rollbackXid(deps.pool, { gtrid: epochGtrid(s.spec.name, 0, 999), bqual: 'tamper' })) === 'rolled-back',
        10_000,
      ).catch(() => undefined);
    }
  },
);

test(
  'starting a pipeline whose ledger and progress markers disagree fails with the evidence, guessing nothing',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'mismatch', records: 300, partitions: 1 });
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      worker: { workflowBundle: bundle() },
    });
    const running = w.run();
    try {
      await drainAndWait(deps, s, await start(deps, s));
      // The last epoch's ledger row names another start offset than its progress marker.
      await deps.pool.query(
        'UPDATE onceflow_ledger SET start_offset = start_offset + 1 WHERE pipeline = ? AND epoch = 2',
        [s.spec.name],
      );
      await assert.rejects((await start(deps, s)).result(), (e: unknown) => {
        const text = causes(e);
        assert.match(text, /epoch 2: the progress marker says offsets \[200, 300\), the ledger \[201, 300\)/);
        assert.match(text, /ReconcileMismatch/);
        return true;
      });
      await deps.pool.query(
        'UPDATE onceflow_ledger SET start_offset = start_offset - 1 WHERE pipeline = ? AND epoch = 2',
        [s.spec.name],
      );
      // The MySQL side "loses" its last two epochs. One epoch apart is what a crash between the two
      // commits leaves (reconcile redoes the missing side, test/recovery.test.ts); two is not.
      await deps.pool.query('DELETE FROM onceflow_ledger WHERE pipeline = ? ORDER BY epoch DESC LIMIT 2', [
        s.spec.name,
      ]);
      const again = await start(deps, s);
      await assert.rejects(again.result(), (e: unknown) => {
        const text = causes(e);
        assert.match(
          text,
          /the MySQL ledger's last epoch is 0, the Kafka progress marker's 2: more than one epoch apart/,
        );
        assert.match(text, /ReconcileMismatch/);
        return true;
      });
    } finally {
      w.shutdown();
      await running;
    }
  },
);

function causes(e: unknown): string {
  const parts: string[] = [];
  for (let c = e as { message?: string; type?: string; cause?: unknown } | undefined; c; c = c.cause as typeof c) {
    parts.push(`${c.type ?? ''} ${c.message ?? ''}`);
  }
  return parts.join(' <- ');
}

test(
  'an XA branch rolled back behind the pipeline before its commit is redone from the source; the ledger row decides',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'xagone', records: 200, partitions: 1 });
    // The MySQL commit of epoch 0 stalls 4 s; meanwhile the prepared branch is rolled back from outside.
    const { faults, lines } = recordedFaults('commit.mysql@epoch=0@partition=0:stall=4000');
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      faults,
      worker: { workflowBundle: bundle() },
    });
    const running = w.run();
    try {
      const handle = await start(deps, s);
      const gtrid = epochGtrid(s.spec.name, 0, 0);
      const rolledBack = await rollBackWhenPrepared(deps, gtrid, 'epoch 0 prepared');
      assert.equal(rolledBack.gtrid, gtrid);
      const [result] = await drainAndWait(deps, s, handle);
      // The commit of epoch 0 reached its MySQL side (the stall that keeps the rollback ahead of XA COMMIT).
      assertFired(lines, faultLine('stall=4000', 'commit.mysql@epoch=0@partition=0'), 'the worker');
      assert.equal(result?.state.mysqlRedos, 1, 'the vanished branch was redone in a local transaction');
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      const [rows] = await deps.pool.query('SELECT redo FROM onceflow_ledger WHERE pipeline = ? AND epoch = 0', [
        s.spec.name,
      ]);
      assert.deepEqual(rows, [{ redo: 1 }]);
    } finally {
      w.shutdown();
      await running;
    }
  },
);

/** Rows of a pipeline's staged epochs, encoded (src/mysql/stage.ts). */
async function encodedRows(pipeline: string): Promise<number> {
  const [r] = await deps.pool.query<RowDataPacket[]>(
    `SELECT COUNT(*) AS c FROM ${STAGE_ROWS_TABLE} WHERE pipeline = ?`,
    [pipeline],
  );
  return Number(r[0]!.c);
}

test(
  'a worker killed after XA COMMIT and before the staged rows are applied: the next worker applies them, once',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'applykill', records: 400, partitions: 1 });
    const { result, report } = await killedThenRecovered(s, 'commit.mysql-committed@epoch=1@partition=0', async () => {
      // Epoch 1 is committed in MySQL, its rows still staged (encoded): the tables lack them right now.
      assert.deepEqual(await pendingEpochs(deps.pool, s.spec.name), [{ partition: 0, epoch: 1 }]);
      assert.ok((await encodedRows(s.spec.name)) > 0, 'the encoded copy of epoch 1 is there');
    });
    // The next worker did not prepare or redo epoch 1: it read the rows back from the encoded copy.
    assert.deepEqual([result.state.redos, result.state.mysqlRedos], [0, 0]);
    assert.ok(report.ok, failedChecks(report));
    assert.deepEqual(await pendingEpochs(deps.pool, s.spec.name), []);
    assert.equal(await encodedRows(s.spec.name), 0);
  },
);

/**
 * Partition 0's first epoch stays prepared for 8 s (stalled right after XA PREPARE, as a
 * crashed or cut-off worker would leave it) while partition 1 writes the same keys. Returns how
 * many epochs partition 1 committed while that branch was prepared, its epochs in total, and
 * how long the branch was seen prepared (the stall held it: the test requires ≥ 5 s).
 */
async function partitionsPastALingeringBranch(
  mode: 'staged' | 'direct',
): Promise<{ whileLingering: number; total: number; lingeredMs: number }> {
  const s = await prepareScenario(deps, {
    prefix: `linger-${mode}`,
    records: 1200,
    partitions: 2,
    mysqlMode: mode,
    epoch: { maxRecords: 50, maxWaitMs: 200 },
  });
  const { faults, lines } = recordedFaults('prepare.xa-prepared@epoch=0@partition=0:stall=8000');
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: compareTransforms(),
    faults,
    worker: { workflowBundle: bundle() },
  });
  const running = w.run();
  try {
    const handle = await start(deps, s);
    const gtrid = epochGtrid(s.spec.name, 0, 0);
    const lingering = async () => (await recoverXids(deps.pool, gtrid)).some((x) => x.gtrid === gtrid);
    await waitUntil('partition 0 epoch 0 prepared', lingering, 30_000, 20);
    const since = Date.now();
    let whileLingering = 0;
    for (;;) {
      const seen = ((await lastLedgerRow(deps.pool, s.spec.name, 1))?.epoch ?? -1) + 1;
      if (!(await lingering())) break;
      whileLingering = seen;
      await sleep(100);
    }
    const lingeredMs = Date.now() - since;
    assertFired(lines, faultLine('stall=8000', 'prepare.xa-prepared@epoch=0@partition=0'), `${mode}: the worker`);
    await drainAndWait(deps, s, handle);
    const report = await verify(deps, s);
    assert.ok(report.ok, `${mode}: ${failedChecks(report)}`);
    return {
      whileLingering,
      total: ((await lastLedgerRow(deps.pool, s.spec.name, 1))?.epoch ?? -1) + 1,
      lingeredMs,
    };
  } finally {
    w.shutdown();
    await running;
  }
}

test(
  'a prepared branch that lingers blocks no other partition (staged MySQL writes); with direct writes it does',
  { timeout: 240_000 },
  async () => {
    const staged = await partitionsPastALingeringBranch('staged');
    assert.equal(staged.total, 12, 'partition 1 has 600 records in epochs of 50');
    assert.ok(
      staged.lingeredMs >= 5000,
      `staged: the branch stayed prepared through the stall (${JSON.stringify(staged)})`,
    );
    assert.equal(
      staged.whileLingering,
      staged.total,
      `staged: partition 1 committed all its epochs while partition 0's branch was prepared (${JSON.stringify(staged)})`,
    );
    // The control: writing the tables inside the branch, partition 1 queues behind its row locks.
    const direct = await partitionsPastALingeringBranch('direct');
    assert.ok(
      direct.lingeredMs >= 5000,
      `direct: the branch stayed prepared through the stall (${JSON.stringify(direct)})`,
    );
    assert.ok(
      direct.whileLingering < direct.total / 2,
      `direct: partition 1 was held back by the prepared branch's row locks (${JSON.stringify(direct)})`,
    );
  },
);

test(
  "a branch another pipeline's killed worker left prepared blocks no pipeline on the same database; its own restart commits it",
  { timeout: 240_000 },
  async () => {
    // Pipeline A's worker dies right after XA PREPARE of its first epoch: the branch stays in
    // doubt (nothing on A's side is running) while pipelines B, whose names sort before A's (the
    // keys of B's ledger, claim and staged rows sit in the index gap before A's), run to the end.
    const a = await prepareScenario(deps, { prefix: 'left-z', records: 200, partitions: 1 });
    const fault = 'prepare.xa-prepared@epoch=0@partition=0';
    const doomed = doomedWorker(a.taskQueue, fault);
    const handleA = await start(deps, a);
    await doomed.died();
    const gtridA = epochGtrid(a.spec.name, 0, 0);
    const inDoubt = async () => (await recoverXids(deps.pool, gtridA)).some((x) => x.gtrid === gtridA);
    assert.ok(await inDoubt(), "A's epoch 0 branch is prepared, its worker dead");
    for (const mode of ['staged', 'direct'] as const) {
      const b = await prepareScenario(deps, {
        prefix: `left-b-${mode}`,
        records: 600,
        partitions: 2,
        mysqlMode: mode,
        epoch: { maxRecords: 50, maxWaitMs: 200 },
      });
      const w = spawnWorker(b.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
      try {
        const handle = await start(deps, b);
        const stalled = sleep(90_000, undefined, { ref: false }).then(() => {
          throw new Error(
            `${mode}: pipeline B did not drain in 90 s beside A's prepared branch; its worker said:\n${w.stderrText}`,
          );
        });
        await Promise.race([drainAndWait(deps, b, handle), stalled]);
        const last = await Promise.all(
          [0, 1].map(async (p) => (await lastLedgerRow(deps.pool, b.spec.name, p))?.epoch),
        );
        assert.deepEqual(last, [5, 5], `${mode}: each partition committed its 300 records in 6 epochs of 50`);
        const report = await verify(deps, b);
        assert.ok(report.ok, `${mode}: ${failedChecks(report)}`);
        assert.ok(await inDoubt(), `${mode}: A's branch was still prepared when B finished`);
      } finally {
        w.kill('SIGTERM');
        await w.exited;
      }
    }
    // A's own next worker finds the branch and commits or redoes the epoch: A exactly once too.
    const second = spawnWorker(a.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
    try {
      await drainAndWait(deps, a, handleA);
      const report = await verify(deps, a);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(await inDoubt(), false, "A's branch was decided by A's recovery");
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  },
);
