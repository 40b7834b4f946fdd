/**
 * Partition groups (spec.parallelism) on the real services: one Kafka transaction and one XA
 * branch per group epoch, covering several source partitions, and everything an ungrouped
 * pipeline keeps — exactly once through failing attempts, a worker killed between prepare and
 * commit, a broker-aborted group transaction redone per partition, a group branch left prepared
 * by a run that was terminated, partitions added while running, pause and resume.
 * ONCEFLOW_RECORD_HISTORIES=1 stores the group workflows' histories under test/histories/group/.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { pipelineStatus } from '../src/cli/status';
import { startPipeline } from '../src/client';
import { committedMarkers } from '../src/kafka/progress';
import { earliestOffset, listTransactions } from '../src/kafka/internals';
import { readGroup } from '../src/activities/source';
import type { Faults } from '../src/faults';
import { prepareBranch, recoverXids } from '../src/mysql/branch';
import { insertLedgerRows } from '../src/mysql/ledger';
import { groupGtrid, pipelineGroupGtridPrefix } from '../src/mysql/xid';
import { groupTransactionalId, groupWorkflowId, pipelineWorkflowId } from '../src/spec';
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
  uniqueName,
  waitUntil,
  type Deps,
} from './support/env';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { createTopic, makeEvents, produceValues } from '../examples/flink-compare/scenario';
import {
  drainAndWait,
  failedChecks,
  prepareScenario,
  rollBackWhenPrepared,
  start,
  verify,
  type Scenario,
} from './support/pipeline';
import { cli } from './support/cli';

let deps: Deps;

before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

test('a group epoch holds at most the epoch bounds, shared among its partitions whatever their backlog; consecutive epochs read every record once, in order (real broker)', async () => {
  const topic = uniqueName('gread');
  await createTopic(deps.admin, topic, 4);
  const backlog = [1000, 100, 100, 0];
  const producer = deps.kafka.producer();
  await producer.connect();
  for (const [partition, n] of backlog.entries()) {
    for (let i = 0; i < n; i += 250) {
      const batch = Array.from({ length: Math.min(250, n - i) }, (_, k) => ({
        partition,
        value: `${partition}:${String(i + k).padStart(4, '0')}`,
      }));
      await producer.send({ topic, messages: batch });
    }
  }
  await producer.disconnect();
  const read = (from: number[], bounds: { maxRecords: number; maxBytes: number }) =>
    readGroup(
      deps.cluster,
      from.map((offset, partition) => ({ topic, partition, from: offset })),
      { ...bounds, maxWaitMs: 0 },
      0,
      () => undefined,
    );

  // The first epoch: 300 records, 100 from each partition that has data (not 300 from the first).
  const first = await read([0, 0, 0, 0], { maxRecords: 300, maxBytes: 1 << 20 });
  assert.deepEqual(
    first.map((r) => r.records.length),
    [100, 100, 100, 0],
  );
  // A byte bound is the epoch's too: 6-byte values, 60 bytes in all.
  const small = await read([0, 0, 0, 0], { maxRecords: 300, maxBytes: 60 });
  assert.ok(small.reduce((n, r) => n + r.records.length, 0) <= 10, JSON.stringify(small.map((r) => r.records.length)));
  assert.ok(
    small.every((r, p) => backlog[p] === 0 || r.records.length > 0),
    'every partition with data took part',
  );

  // Epoch after epoch until caught up: never more than the bound, every record once and in order.
  const seen: string[][] = [[], [], [], []];
  let from = [0, 0, 0, 0];
  for (let epochs = 0; from.some((f, p) => f < backlog[p]!); epochs++) {
    assert.ok(epochs < 20, `not caught up after 20 epochs: at ${from.join(', ')}`);
    const rs = await read(from, { maxRecords: 300, maxBytes: 1 << 20 });
    assert.ok(rs.reduce((n, r) => n + r.records.length, 0) <= 300);
    rs.forEach((r, p) => seen[p]!.push(...r.records.map((x) => String(x.value))));
    from = rs.map((r) => r.end);
  }
  seen.forEach((values, p) =>
    assert.deepEqual(
      values,
      Array.from({ length: backlog[p]! }, (_, i) => `${p}:${String(i).padStart(4, '0')}`),
    ),
  );
});

/** Replays every run of the group's workflow with the current code (and stores them with ONCEFLOW_RECORD_HISTORIES=1); returns their JSON. */
async function replayGroup(pipeline: string, group: number, label: string): Promise<string[]> {
  const id = groupWorkflowId(pipeline, group);
  const out: string[] = [];
  for await (const run of deps.client.workflow.list({ query: `WorkflowId = '${id}'` })) {
    const history = await deps.client.workflow.getHandle(id, run.runId).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: bundle() }, history, `${id}/${run.runId}`);
    const json = historyToJSON(history);
    if (process.env.ONCEFLOW_RECORD_HISTORIES) {
      const dir = join(__dirname, 'histories', 'group');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `group-${label}-${out.length}.json`), json);
    }
    out.push(json);
  }
  return out;
}

/** The xids that committed progress markers of the given partitions name, per partition. */
async function markerXids(s: Scenario, partitions: number[]): Promise<Map<number, Set<string>>> {
  const out = new Map<number, Set<string>>();
  for (const p of partitions) {
    const ms = await committedMarkers(
      deps.cluster,
      s.spec.progressTopic,
      p,
      await earliestOffset(deps.cluster, s.spec.progressTopic, p),
    );
    out.set(p, new Set(ms.flatMap((m) => (m.xid ? [m.xid] : []))));
  }
  return out;
}

async function withWorker<T>(s: Scenario, fn: () => Promise<T>, faults?: Faults): Promise<T> {
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: compareTransforms(),
    ...(faults ? { faults } : {}),
    worker: { workflowBundle: bundle() },
  });
  const running = w.run();
  try {
    return await fn();
  } finally {
    w.shutdown();
    await running;
  }
}

test(
  "a group epoch's decided branch rolled back behind the pipeline while a stale branch of the same group epoch holds its ledger rows: the redo rolls the stale one back and writes the epoch once",
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'gxagone', records: 200, partitions: 2, parallelism: 1 });
    // The MySQL commit of group epoch 0 stalls 4 s; meanwhile its decided branch is rolled back from
    // outside and a stale attempt's branch (as a zombie prepare leaves one) takes the members' ledger rows.
    const { faults, lines } = recordedFaults('commit.mysql@epoch=0@partition=0:stall=4000');
    await withWorker(
      s,
      async () => {
        const handle = await start(deps, s);
        const gtrid = groupGtrid(s.spec.name, 0, 0);
        const decided = await rollBackWhenPrepared(deps, gtrid, 'group epoch 0 prepared');
        const stale = { gtrid, bqual: `${decided.bqual}-zombie` };
        // Prepared the way a prepare attempt leaves its branch (its session closed, the branch detached).
        await prepareBranch(deps.pool, stale, (conn) =>
          insertLedgerRows(
            conn,
            s.spec.name,
            [0, 1].map((partition) => ({ partition, epoch: 0, start: 0, end: 1, records: 1, redo: false })),
          ),
        );
        const [result] = await drainAndWait(deps, s, handle);
        // The commit of epoch 0 reached its MySQL side (the stall that keeps the rollback ahead of XA COMMIT).
        assertFired(lines, faultLine('stall=4000', 'commit.mysql@epoch=0@partition=0'), 'the worker');
        assert.equal(result?.state.mysqlRedos, 1, 'the vanished branch was redone in a local transaction');
        assert.deepEqual(await recoverXids(deps.pool, gtrid), [], 'the stale branch was rolled back');
        const report = await verify(deps, s);
        assert.ok(report.ok, failedChecks(report));
        const [rows] = await deps.pool.query(
          'SELECT source_partition AS p, redo FROM onceflow_ledger WHERE pipeline = ? AND epoch = 0 ORDER BY p',
          [s.spec.name],
        );
        assert.deepEqual(rows, [
          { p: 0, redo: 1 },
          { p: 1, redo: 1 },
        ]);
      },
      faults,
    );
  },
);

// The poison records all fall on partition 5, 50 offsets apart: up to 2 in a group epoch of 100 records, an explicit budget.
test(
  '6 partitions in 2 groups: each group epoch is one transaction and one branch for its partitions; failing attempts, poison records, exactly once',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'groups',
      records: 1800,
      partitions: 6,
      parallelism: 2,
      poisonEvery: 300,
      deadLetter: { maxRatio: 0.05 },
      epochsPerRun: 2,
      transformOptions: { compareFailAfter: 10, compareFailEveryNthEpoch: 2 },
    });
    await withWorker(s, async () => {
      const handle = await start(deps, s);
      const results = await drainAndWait(deps, s, handle);
      assert.deepEqual(results.map((r) => r.partition).sort(), [0, 1, 2, 3, 4, 5]);
      assert.equal(
        results.reduce((n, r) => n + r.state.records, 0),
        1800,
      );
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.sourceRecords, 1800);
      assert.equal(report.totals.deadLetters, s.input.poison);
      assert.ok(report.totals.abortedCopies > 0, 'the compare sink failed some attempts, leaving aborted copies');
    });
    // Group 0 = partitions 0, 2, 4: their markers name the same group branches (one XA branch and
    // one transaction per group epoch); group 1's partitions never share one with group 0's.
    const xids = await markerXids(s, [0, 1, 2, 3, 4, 5]);
    const shared = [...xids.get(0)!].filter((x) => xids.get(2)!.has(x) && xids.get(4)!.has(x));
    assert.ok(shared.length > 0, 'a group epoch covered partitions 0, 2 and 4 together');
    assert.ok(
      shared.every((x) => x.startsWith(`${pipelineGroupGtridPrefix(s.spec.name)}0:`)),
      `group 0's branches: ${shared.join(', ')}`,
    );
    assert.ok(![...xids.get(1)!].some((x) => xids.get(0)!.has(x)));
    const histories = await replayGroup(s.spec.name, 0, 'compare-sink-retries');
    assert.ok(histories.length >= 2, 'the group continued as new (epochsPerRun 2)');
    assert.match(histories.join('\n'), /"advanceMembers"/);
  },
);

test(
  'a group worker killed with SIGKILL after prepare and before commit: a new worker commits the group epoch, exactly once',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'gkill', records: 800, partitions: 4, parallelism: 2 });
    const doomed = doomedWorker(s.taskQueue, 'commit.before@epoch=1@partition=0');
    const handle = await start(deps, s);
    await doomed.died();
    const second = spawnWorker(s.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
    try {
      const results = await drainAndWait(deps, s, handle);
      assert.equal(results.length, 4);
      assert.ok(
        results.every((r) => r.state.redos === 0),
        'the prepared group transaction was committed, not redone',
      );
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs, 800);
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  },
);

test(
  'a group transaction aborted by the broker (timeout) is redone per partition before the next group epoch; MySQL not doubled',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'gtimeout',
      records: 600,
      partitions: 2,
      parallelism: 1,
      transactionTimeoutMs: 3000,
      epochsPerRun: 2,
    });
    const doomed = doomedWorker(s.taskQueue, 'commit.before@epoch=0@partition=0');
    const handle = await start(deps, s);
    await doomed.died();
    // The advance activity is retried after its 10 s heartbeat timeout, past the 3 s transaction timeout.
    const second = spawnWorker(s.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
    try {
      const results = await drainAndWait(deps, s, handle);
      assert.deepEqual(
        results.map((r) => r.state.redos).sort(),
        [1, 1],
        'group epoch 0 was redone for both partitions',
      );
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs, 600);
      assert.ok(
        report.totals.abortedCopies >= 200,
        `the aborted group epoch 0 is visible to read_uncommitted: ${report.totals.abortedCopies}`,
      );
      const histories = (await replayGroup(s.spec.name, 0, 'redo-continue-as-new')).join('\n');
      assert.match(histories, /"redoMembers"/);
      assert.match(histories, /ContinuedAsNew/);
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  },
);

test(
  "a group branch left prepared by a terminated run: onceflow transactions --resolve decides it from the partitions' markers, and the restarted pipeline finishes exactly once",
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'gleft', records: 600, partitions: 2, parallelism: 1 });
    const doomed = doomedWorker(s.taskQueue, 'commit.before@epoch=1@partition=0');
    await start(deps, s);
    await doomed.died();
    const left = await recoverXids(deps.pool, pipelineGroupGtridPrefix(s.spec.name));
    assert.ok(left.length >= 1, 'group epoch 1 left its XA branch prepared');
    for (const id of [pipelineWorkflowId(s.spec.name), groupWorkflowId(s.spec.name, 0)])
      await deps.client.workflow.getHandle(id).terminate('groups.test.ts: operator gave up');
    // Through the command a user types: it reads the spec back from the terminated pipeline and finds its partitions.
    const resolved = await cli('transactions', s.spec.name, '--resolve', '--json');
    assert.equal(resolved.code, 0, resolved.out + resolved.err);
    const done = JSON.parse(resolved.out) as string[];
    assert.ok(
      done.some((l) => /^group 0 epoch 1: XA .* rolled-back \(no committed progress marker names it\)/.test(l)),
      done.join('\n'),
    );
    assert.deepEqual(await recoverXids(deps.pool, pipelineGroupGtridPrefix(s.spec.name)), []);
    await withWorker(s, async () => {
      const handle = await startPipeline(deps.client, s.spec, s.taskQueue);
      await drainAndWait(deps, s, handle);
      const report = await verify(deps, s);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs, 600);
    });
  },
);

test(
  'a transaction left open by a group that no longer exists (parallelism lowered after a crash): the restarted pipeline fences it at once instead of waiting for the broker to abort it',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'ggone', records: 400, partitions: 2, parallelism: 2 });
    // Group 1 (partition 1) dies with its epoch 1 sent to Kafka and not prepared in MySQL.
    const doomed = doomedWorker(s.taskQueue, 'prepare.kafka-sent@epoch=1@partition=1');
    await start(deps, s);
    await doomed.died();
    const id = groupTransactionalId(s.spec.name, 1, 1);
    const open = async () =>
      (await listTransactions(deps.cluster, ['Ongoing'])).transactions.map((t) => t.transactionalId);
    assert.ok((await open()).includes(id), `group 1's epoch 1 left ${id} open`);
    for (const wf of [
      pipelineWorkflowId(s.spec.name),
      groupWorkflowId(s.spec.name, 0),
      groupWorkflowId(s.spec.name, 1),
    ])
      await deps.client.workflow.getHandle(wf).terminate('groups.test.ts: restarted with one group');
    // The same pipeline with parallelism 1: group 1's ids are nobody's now. The broker would abort
    // the open transaction at its timeout (5 min); until then partition 1's LSO cannot pass it.
    const lowered = { ...s, spec: { ...s.spec, parallelism: 1 } };
    await withWorker(lowered, async () => {
      const started = Date.now();
      const handle = await start(deps, lowered);
      await drainAndWait(deps, lowered, handle);
      const took = Date.now() - started;
      assert.ok(took < 60_000, `drained in ${took} ms, not at the transaction timeout`);
      assert.ok(!(await open()).includes(id), `${id} is no longer open`);
      const report = await verify(deps, lowered);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs, 400);
      assert.ok(report.totals.abortedCopies > 0, "the fenced transaction's records are there, aborted");
    });
  },
);

test(
  'partitions added while a grouped pipeline runs join their group; onceflow pause and resume reach every group; status answers per partition',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, {
      prefix: 'gadd',
      records: 400,
      partitions: 2,
      parallelism: 2,
      epoch: { maxRecords: 50, maxWaitMs: 300 },
    });
    const spec = { ...s.spec, source: { ...s.spec.source, discoveryIntervalMs: 1000 } };
    const t = { ...s, spec };
    await withWorker(t, async () => {
      const handle = await start(deps, t);
      await waitUntil(
        'both partitions committing',
        async () => {
          const rows = await pipelineStatus(deps, spec, 2);
          return rows.length === 2 && rows.every((r) => (r.committedOffset ?? 0) > 0);
        },
        30_000,
      );
      // Through the command a user types: it must reach the group workflows, not partition workflows that do not exist.
      const paused = await cli('pause', spec.name, '--json');
      assert.equal(paused.code, 0, paused.out + paused.err);
      assert.deepEqual(
        (JSON.parse(paused.out) as { partition: number; ok: boolean }[]).map((r) => [r.partition, r.ok]),
        [
          [0, true],
          [1, true],
        ],
      );
      await waitUntil(
        'both groups paused',
        async () => {
          const rows = await pipelineStatus(deps, spec, 2);
          return rows.length === 2 && rows.every((r) => r.phase === 'paused');
        },
        30_000,
      );
      const again = await cli('pause', spec.name);
      assert.equal(again.code, 1, 'pausing a paused pipeline is refused');
      assert.match(again.out, /partition 0: rejected — .*already paused/);
      const resumed = await cli('resume', spec.name);
      assert.equal(resumed.code, 0, resumed.out + resumed.err);
      await deps.admin.createPartitions({ topicPartitions: [{ topic: spec.source.topic, count: 4 }] });
      const more = makeEvents(400, 11, 0);
      await produceValues(deps.settings.kafka, spec.source.topic, 4, more.values);
      const rows = await waitUntil(
        'the new partitions are read by their groups',
        async () => {
          const r = await pipelineStatus(deps, spec, 4);
          return r.length === 4 && r.every((x) => (x.committedOffset ?? 0) > 0) && r;
        },
        60_000,
      );
      assert.deepEqual(
        rows.map((r) => r.workflow),
        [0, 1, 0, 1].map((g) => groupWorkflowId(spec.name, g)),
      );
      await drainAndWait(deps, t, handle);
      const report = await verify(deps, t);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.sourceRecords, 800);
    });
    // The pipeline workflow that started the groups and told them of the new partitions replays too.
    const history = await deps.client.workflow.getHandle(pipelineWorkflowId(spec.name)).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: bundle() }, history, pipelineWorkflowId(spec.name));
    const json = historyToJSON(history);
    assert.match(json, /"addMembers"/);
    if (process.env.ONCEFLOW_RECORD_HISTORIES)
      writeFileSync(join(__dirname, 'histories', 'pipeline', 'pipeline-groups-0.json'), json);
    await replayGroup(spec.name, 0, 'joined');
  },
);
