/**
 * Sources users have: partitions added to the source while the pipeline runs, several source
 * topics, an output topic with fewer partitions than the source, a source topic deleted under a
 * running pipeline — each on the real services, checked exactly once with verify and the MySQL
 * sums; plus the definition rules for source.topics and source.discoveryIntervalMs.
 */
import { test, before, after } from 'node:test';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import assert from 'node:assert/strict';
import {
  createTopic,
  makeEvents,
  produceValues,
  resetPipeline,
  tableSums,
  compareSpec,
  type InputSet,
} from '../examples/flink-compare/scenario';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { applyTransform, tableMap } from '../src/activities/apply';
import { cli } from './support/cli';
import { pipelineStatus } from '../src/cli/status';
import { startPipeline } from '../src/client';
import { ValidationError } from '../src/errors';
import { definePipeline } from '../src/schema/pipeline';
import { partitionWorkflowId, pipelineWorkflowId, type PipelineInput, type PipelineSpec } from '../src/spec';
import { createOnceflowWorker } from '../src/worker';
import type { PartitionResult } from '../src/workflows/partition';
import type { PipelineInfo } from '../src/workflows/interface';
import type { PipelineCarry } from '../src/workflows/pipeline';
import { SEARCH_ATTRIBUTES } from '../src/search-attributes';
import { bundle, openDeps, quietRuntime, uniqueName, waitUntil, type Deps } from './support/env';
import { failedChecks, verify, type Scenario } from './support/pipeline';

const TRANSFORMS = join(__dirname, '..', 'examples', 'flink-compare', 'transforms.ts');

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/** A pipeline definition for the compare transform over `source`, with a 1 s discovery interval. */
function specFor(name: string, source: PipelineInput['source']): PipelineSpec {
  const base = compareSpec({
    name,
    source: { topic: 'placeholder' },
    kafkaSink: { topic: `${name}.out` },
    transformOptions: { table: `t_${name.replace(/[^a-z0-9]/g, '_')}` },
  });
  // The inputs hold up to 4 poison records per 100 (one partition gets them all): an explicit dead-letter budget.
  return definePipeline({
    ...base,
    source: { discoveryIntervalMs: 1000, ...source },
    epoch: { maxRecords: 100, maxWaitMs: 500 },
    deadLetter: { maxRatio: 0.1 },
  });
}

/** A single-topic pipeline over a fresh `partitions`-partition topic holding `records` events (`seed`, one poison every `poisonEvery`). */
async function singleTopic(prefix: string, partitions: number, records: number, seed: number, poisonEvery = 0) {
  const name = uniqueName(prefix);
  const spec = specFor(name, { topic: `${name}.in` });
  await resetPipeline(deps.admin, deps.pool, spec, partitions);
  const first = makeEvents(records, seed, poisonEvery);
  await produceValues(deps.settings.kafka, spec.source.topic, partitions, first.values);
  return { name, spec, first, tq: uniqueName('tq') };
}

/** A pipeline over two fresh topics `<name>.a` and `<name>.b` with the partition counts given. */
async function twoTopics(prefix: string, partitionsA: number, partitionsB: number) {
  const name = uniqueName(prefix);
  const [a, b] = [`${name}.a`, `${name}.b`];
  const spec = specFor(name, { topics: [a, b] });
  await resetPipeline(deps.admin, deps.pool, spec, partitionsA);
  await createTopic(deps.admin, b, partitionsB);
  return { name, a, b, spec };
}

/** Input sums of several input sets together (what the MySQL table must hold). */
function mergedSums(...inputs: InputSet[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const i of inputs) for (const [k, v] of i.sums) out.set(k, (out.get(k) ?? 0) + v);
  return out;
}

/** Produces compare events to exactly the partitions given, round-robin. */
async function produceTo(
  topic: string,
  partitions: number[],
  values: ReturnType<typeof makeEvents>['values'],
): Promise<void> {
  const producer = deps.kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const messages = values.map((v, i) => ({
      ...(typeof v === 'string' ? { key: `poison-${i}`, value: v } : { key: v.id, value: JSON.stringify(v) }),
      partition: partitions[i % partitions.length]!,
    }));
    await producer.send({ topic, acks: -1, messages });
  } finally {
    await producer.disconnect();
  }
}

/** Runs `body` with an in-process worker on a fresh task queue. */
async function withWorker<T>(taskQueue: string, body: () => Promise<T>): Promise<T> {
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue,
    transforms: compareTransforms(),
    worker: { workflowBundle: bundle() },
  });
  const running = w.run();
  try {
    return await body();
  } finally {
    w.shutdown();
    await running;
  }
}

async function drain(spec: PipelineSpec): Promise<PartitionResult[]> {
  await deps.client.workflow.getHandle(pipelineWorkflowId(spec.name)).signal('control', 'drain');
  return (await deps.client.workflow.getHandle(pipelineWorkflowId(spec.name)).result()) as PartitionResult[];
}

async function assertExactlyOnce(spec: PipelineSpec, records: number, inputs: InputSet[]): Promise<void> {
  const report = await verify(deps, { spec } as Scenario);
  assert.ok(report.ok, failedChecks(report));
  assert.equal(report.totals.sourceRecords, records);
  assert.equal(
    report.totals.outputs,
    inputs.reduce((a, i) => a + i.events.length, 0),
  );
  assert.equal(
    report.totals.deadLetters,
    inputs.reduce((a, i) => a + i.poison, 0),
  );
  assert.deepEqual(await tableSums(deps.pool, spec.mysqlSink.tables[0]!.name), mergedSums(...inputs));
}

test(
  'partitions added to the source while the pipeline runs are discovered, read from their start and drained',
  { timeout: 110_000 },
  async () => {
    const { spec, first, tq } = await singleTopic('grow', 2, 300, 11, 100);
    await withWorker(tq, async () => {
      await startPipeline(deps.client, spec, tq);
      // Running on two partitions; then the topic grows to four and the new ones get records.
      await waitUntil(
        'both partitions committing',
        async () => {
          const rows = await pipelineStatus(deps, spec, 2);
          return rows.length === 2 && rows.every((r) => (r.committedOffset ?? 0) > 0);
        },
        30_000,
      );
      await deps.admin.createPartitions({ topicPartitions: [{ topic: spec.source.topic, count: 4 }] });
      const later = makeEvents(200, 12, 50);
      await produceTo(spec.source.topic, [2, 3], later.values);
      const rows = await waitUntil(
        'status shows the new partitions',
        async () => {
          const r = await pipelineStatus(deps, spec, 2);
          return r.length === 4 && r.every((x) => x.phase !== 'not started') && r;
        },
        30_000,
      );
      assert.deepEqual(
        rows.map((r) => [r.partition, r.topicPartition, r.workflow]),
        [0, 1, 2, 3].map((p) => [p, p, partitionWorkflowId(spec.name, p)]),
      );
      // Records produced to a partition added just before the drain must not be skipped either.
      await deps.admin.createPartitions({ topicPartitions: [{ topic: spec.source.topic, count: 5 }] });
      const last = makeEvents(40, 13);
      await produceTo(spec.source.topic, [4], last.values);
      const results = await drain(spec);
      assert.deepEqual(
        results.map((r) => [r.partition, r.reason]),
        [0, 1, 2, 3, 4].map((p) => [p, 'drained']),
      );
      await assertExactlyOnce(spec, 540, [first.input, later.input, last.input]);
      // The progress topic grew with the source; the output topic did not (ids 2..4 write to id mod 2).
      const meta = await deps.admin.fetchTopicMetadata({ topics: [spec.progressTopic, spec.kafkaSink.topic] });
      assert.deepEqual(
        meta.topics.map((t) => [t.name, t.partitions.length]).sort(),
        [
          [spec.kafkaSink.topic, 2],
          [spec.progressTopic, 5],
        ].sort(),
      );
      const after = await pipelineStatus(deps, spec, 2);
      assert.equal(after.length, 5);
      for (const r of after) assert.equal(r.lag, 0, `partition ${r.partition} caught up`);
    });
  },
);

test(
  'several source topics: each (topic, partition) its own partition workflow, exactly once',
  { timeout: 110_000 },
  async () => {
    const { name, a, b, spec } = await twoTopics('topics', 3, 2);
    const inA = makeEvents(300, 21, 75);
    const inB = makeEvents(200, 22, 0);
    await produceValues(deps.settings.kafka, a, 3, inA.values);
    await produceValues(deps.settings.kafka, b, 2, inB.values);
    const tq = uniqueName('tq');
    await withWorker(tq, async () => {
      await startPipeline(deps.client, spec, tq);
      await waitUntil(
        'all five partition workflows started',
        async () => {
          const rows = await pipelineStatus(deps, spec, 0);
          return rows.length === 5 && rows.every((r) => r.phase !== 'not started');
        },
        30_000,
      );
      // Through the command a user types: it reaches the partitions of both topics, all five.
      const drained = await cli('stop', name, '--drain', '--json');
      assert.equal(drained.code, 0, drained.out + drained.err);
      assert.deepEqual(
        (JSON.parse(drained.out) as { partition: number; ok: boolean }[]).map((r) => [r.partition, r.ok]),
        [0, 1, 2, 3, 4].map((p) => [p, true]),
      );
      const results = (await deps.client.workflow.getHandle(pipelineWorkflowId(name)).result()) as PartitionResult[];
      assert.equal(results.length, 5);
      const rows = await pipelineStatus(deps, spec, 0);
      assert.deepEqual(
        rows.map((r) => [r.partition, r.label]),
        [
          [0, `${a}[0]`],
          [1, `${a}[1]`],
          [2, `${a}[2]`],
          [3, `${b}[0]`],
          [4, `${b}[1]`],
        ],
      );
      // The memo names the topic and partition each id reads.
      const d = await deps.client.workflow.getHandle(partitionWorkflowId(name, 4)).describe();
      assert.equal(await d.memo?.source, b);
      assert.equal(await d.memo?.sourcePartition, 1);
      await assertExactlyOnce(spec, 500, [inA.input, inB.input]);
    });
  },
);

test(
  'an output topic with fewer partitions than the source: outputs go to id mod its partitions, verified',
  { timeout: 110_000 },
  async () => {
    const name = uniqueName('narrow');
    const spec = specFor(name, { topic: `${name}.in` });
    await resetPipeline(deps.admin, deps.pool, spec, 4);
    await createTopic(deps.admin, spec.kafkaSink.topic, 2);
    await createTopic(deps.admin, spec.deadLetterTopic, 1);
    const input = makeEvents(400, 31, 40);
    await produceValues(deps.settings.kafka, spec.source.topic, 4, input.values);
    const tq = uniqueName('tq');
    await withWorker(tq, async () => {
      await startPipeline(deps.client, spec, tq);
      await drain(spec);
    });
    const report = await verify(deps, { spec } as Scenario);
    assert.ok(report.ok, failedChecks(report));
    assert.deepEqual(
      report.outputs.map((o) => [o.partition, o.sources]),
      [
        [0, [0, 2]],
        [1, [1, 3]],
      ],
    );
    await assertExactlyOnce(spec, 400, [input.input]);
  },
);

test(
  'a deleted source topic fails its partitions with an error naming it; status and verify say so',
  { timeout: 110_000 },
  async () => {
    const { name, a, b, spec } = await twoTopics('gone', 1, 1);
    await produceValues(deps.settings.kafka, a, 1, makeEvents(50, 41).values);
    const tq = uniqueName('tq');
    await withWorker(tq, async () => {
      await startPipeline(deps.client, spec, tq);
      await waitUntil(
        'both partitions running',
        async () =>
          (await pipelineStatus(deps, spec, 0)).filter((r) => r.phase === 'preparing' || r.phase === 'committing')
            .length === 2,
        30_000,
      );
      await deps.admin.deleteTopics({ topics: [b], timeout: 30_000 });
      const gone = partitionWorkflowId(name, 1);
      await assert.rejects(deps.client.workflow.getHandle(gone).result(), (e: Error) => {
        const text = `${e.message} ${(e.cause as Error | undefined)?.message ?? ''} ${((e.cause as Error | undefined)?.cause as Error | undefined)?.message ?? ''}`;
        assert.match(text, new RegExp(`source topic '${b.replace(/\./g, '\\.')}'`));
        return true;
      });
      const rows = await pipelineStatus(deps, spec, 0);
      assert.equal(rows.length, 2);
      assert.match(rows[1]!.lastError ?? '', /does not exist any more/);
      // The rest of the pipeline drains; the pipeline then reports the failed partition.
      await assert.rejects(drain(spec), (e: Error) => {
        assert.match(String((e.cause as Error | undefined)?.message), /partition 1 failed: source topic/);
        return true;
      });
    });
    // `onceflow verify` as a user runs it: the failed check names the topic, and the exit code says so.
    const verified = await cli('verify', spec.name, '--transforms', TRANSFORMS, '--json');
    assert.equal(verified.code, 1, verified.err);
    const report = JSON.parse(verified.out) as { ok: boolean; checks: { name: string; ok: boolean; detail: string }[] };
    assert.equal(report.ok, false);
    const check = report.checks.find((c) => c.name === 'source topics exist')!;
    assert.equal(check.ok, false);
    assert.match(check.detail, new RegExp(b.replace(/\./g, '\\.')));
  },
);

test(
  'the pipeline continues as new while discovering; its children keep running and it still drains every partition',
  { timeout: 110_000 },
  async () => {
    const { name, spec, first, tq } = await singleTopic('can', 2, 200, 51, 50);
    const id = pipelineWorkflowId(name);
    const runs = async () => {
      const out: string[] = [];
      for await (const w of deps.client.workflow.list({ query: `WorkflowId = '${id}'` })) out.push(w.runId);
      return out;
    };
    await withWorker(tq, async () => {
      // Two discovery rounds per run (1 s apart): the run continues as new every ~2 s.
      const carry: PipelineCarry = {
        control: { paused: false, drain: false, stop: false },
        sources: [],
        ended: [],
        roundsPerRun: 2,
      };
      await deps.client.workflow.start('pipelineWorkflow', {
        taskQueue: tq,
        workflowId: id,
        args: [spec, carry],
        typedSearchAttributes: [{ key: SEARCH_ATTRIBUTES.pipeline, value: name }],
      });
      await waitUntil('the pipeline continued as new', async () => (await runs()).length >= 2, 30_000);
      const firstRun = (await runs()).at(-1);
      // Partitions added after that are found by a later run; the first ones run on, unparented.
      await deps.admin.createPartitions({ topicPartitions: [{ topic: spec.source.topic, count: 3 }] });
      const later = makeEvents(100, 52);
      await produceTo(spec.source.topic, [2], later.values);
      // The info query (what the CLI asks) lists every partition workflow, those of earlier runs too.
      const info = await waitUntil(
        'partition 2 started',
        async () => {
          const i = await deps.client.workflow.getHandle(id).query<PipelineInfo>('info');
          return i.sources?.length === 3 && i;
        },
        30_000,
      );
      assert.deepEqual(
        info.sources?.map((x) => [x.id, x.topic, x.partition]),
        [0, 1, 2].map((p) => [p, spec.source.topic, p]),
      );
      const results = await drain(spec);
      assert.deepEqual(
        results.map((r) => [r.partition, r.reason]),
        [0, 1, 2].map((p) => [p, 'drained']),
      );
      // Partition 2 was started by a later run than partitions 0 and 1, which outlived theirs.
      const parentOf = async (p: number) =>
        (await deps.client.workflow.getHandle(partitionWorkflowId(name, p)).describe()).raw.workflowExecutionInfo
          ?.parentExecution?.runId;
      assert.equal(await parentOf(0), firstRun);
      assert.notEqual(await parentOf(2), firstRun);
      await assertExactlyOnce(spec, 300, [first.input, later.input]);
      // Every run replays with the current code; ONCEFLOW_RECORD_HISTORIES=1 keeps them for test/replay.test.ts.
      let n = 0;
      for (const runId of (await runs()).reverse()) {
        const history = await deps.client.workflow.getHandle(id, runId).fetchHistory();
        await Worker.runReplayHistory({ workflowBundle: bundle() }, history, `${id}/${runId}`);
        if (process.env.ONCEFLOW_RECORD_HISTORIES) {
          mkdirSync(join(__dirname, 'histories', 'pipeline'), { recursive: true });
          writeFileSync(
            join(__dirname, 'histories', 'pipeline', `pipeline-discovery-${n}.json`),
            historyToJSON(history),
          );
        }
        n++;
      }
      // A partition workflow started by the new code (SourceRef input, reports its end by signal).
      const child = deps.client.workflow.getHandle(partitionWorkflowId(name, 2));
      const childHistory = await child.fetchHistory();
      await Worker.runReplayHistory({ workflowBundle: bundle() }, childHistory, child.workflowId);
      if (process.env.ONCEFLOW_RECORD_HISTORIES)
        writeFileSync(
          join(__dirname, 'histories', 'pipeline', 'partition-with-source-0.json'),
          historyToJSON(childHistory),
        );
    });
  },
);

test('source.topics and source.discoveryIntervalMs are validated, naming the field', () => {
  const base = { name: 'v', transform: 't', kafkaSink: { topic: 'out' }, mysqlSink: { tables: [] } };
  const fields = (source: unknown) => {
    try {
      definePipeline({ ...base, source } as PipelineInput);
      return [];
    } catch (e) {
      assert.ok(e instanceof ValidationError, String(e));
      return e.problems.map((p) => p.field);
    }
  };
  assert.deepEqual(fields({ topic: 'a', topics: ['b'] }), ['source']);
  assert.deepEqual(fields({}), ['source.topic']);
  assert.deepEqual(fields({ topics: [] }), ['source.topics']);
  assert.deepEqual(fields({ topics: ['a', 'bad topic', 'a'] }), ['source.topics[1]', 'source.topics[2]']);
  assert.deepEqual(fields({ topics: ['a', 'out'] }), ['kafkaSink.topic']);
  assert.deepEqual(fields({ topic: 'a', discoveryIntervalMs: 10 }), ['source.discoveryIntervalMs']);
  assert.deepEqual(fields({ topic: 'a', discoveryIntervalMs: 1.5e9 }), ['source.discoveryIntervalMs']);
  assert.deepEqual(fields({ topic: 'a', discoveryIntervalMs: '30s' }), ['source.discoveryIntervalMs']);
  const one = definePipeline({ ...base, source: { topic: 'a' } });
  assert.deepEqual(one.source, { topic: 'a', startFrom: 'earliest', discoveryIntervalMs: 30_000 });
  const two = definePipeline({ ...base, source: { topics: ['a', 'b'], discoveryIntervalMs: 5000 } });
  assert.deepEqual(two.source, { topic: 'a', topics: ['a', 'b'], startFrom: 'earliest', discoveryIntervalMs: 5000 });
});

test('default output partition is id mod the output partitions; a chosen partition that does not exist dead-letters its record', async () => {
  const spec = definePipeline({
    name: 'p',
    transform: 't',
    source: { topic: 'a' },
    kafkaSink: { topic: 'out' },
    mysqlSink: { tables: [] },
  });
  const rec = (offset: number) => ({
    topic: 'a',
    partition: 0,
    offset,
    key: null,
    value: Buffer.from(String(offset)),
    headers: {},
    timestamp: '0',
  });
  const ctx = { pipeline: 'p', partition: 5, epoch: 0, attempt: 1, options: {} };
  const layout = { outputPartitions: 2, deadLetterPartitions: 3 };
  const t = {
    map: (r: { offset: number }) => ({
      kafka: [{ value: 'x', ...(r.offset === 1 ? { partition: 7 } : r.offset === 2 ? { partition: 0 } : {}) }],
    }),
  };
  const out = await applyTransform(spec, t, [rec(0), rec(1), rec(2)], ctx, tableMap(spec), layout);
  assert.deepEqual(
    out.outputs.map((o) => o.partition),
    [1, 0],
  );
  assert.equal(out.deadLetters.length, 1);
  assert.equal(out.deadLetters[0]!.partition, 5 % 3);
  assert.match(
    out.deadLetters[0]!.headers!['onceflow.error']!,
    /output partition 7 does not exist: 'out' has partitions 0 to 1/,
  );
  // Without a layout (runs started before): the record's own partition, as always.
  const old = await applyTransform(spec, t, [rec(0)], ctx, tableMap(spec));
  assert.equal(old.outputs[0]!.partition, 0);
});
