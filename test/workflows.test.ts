/**
 * The workflow tier: the epoch engine (src/workflows/engine.ts) — as an ungrouped partition's
 * group of one and as a partition group — and the legacy partition loop that runs without a
 * SourceRef still take (src/workflows/legacy/partition.ts) run unchanged on a Temporal dev server (TestWorkflowEnvironment.createLocal, started from the
 * Temporal CLI that scripts/services.sh builds — never downloaded) against stub activities
 * (test/support/stub-activities.ts) instead of Kafka and MySQL. Each test checks which
 * activities the loop scheduled, in which order, with which epochs and offsets, and what the
 * workflow returned. No Kafka, no MySQL: `npm run test:workflows` (scripts/test.sh --workflows).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { toolPaths } from '../src/config';
import { SEARCH_ATTRIBUTES } from '../src/search-attributes';
import { definePipeline } from '../src/schema/pipeline';
import { type PipelineSpec } from '../src/spec';
import type { Control, GroupMember, PartitionState } from '../src/protocol';
import { addMembersSignal, controlSignal, partitionWorkflow } from '../src/workflows/partition';
import { groupWorkflow } from '../src/workflows/group';
import { quietRuntime, uniqueName, workflowCode } from './support/env';
import { engineStubs, partitionStubs } from './support/stub-activities';

let env: TestWorkflowEnvironment | undefined;

before(async () => {
  quietRuntime();
  const { temporalBin } = toolPaths();
  if (!temporalBin) {
    throw new Error(
      'the Temporal CLI is not known: set ONCEFLOW_TEMPORAL_BIN to its path, or run `npm run test:workflows` (scripts/test.sh builds it with scripts/services.sh install temporal)',
    );
  }
  env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: temporalBin },
      ip: '127.0.0.1',
      searchAttributes: Object.values(SEARCH_ATTRIBUTES),
      log: { format: 'pretty', level: 'error' },
    },
  });
});

after(async () => {
  await env?.teardown();
});

const DRAIN: Control = { paused: false, drain: true, stop: false };

/**
 * `twoActivityLoop`: the spec of a run recorded before `epoch.commitWithNextPrepare` was removed
 * from the definition (a benchmark knob); such runs still continue on the two-activity loop.
 */
function stubSpec(over: { epochsPerRun?: number; twoActivityLoop?: boolean; parallelism?: number } = {}): PipelineSpec {
  const spec = definePipeline({
    name: uniqueName('wft'),
    transform: 'stub',
    source: { topic: 'stub.in' },
    kafkaSink: { topic: 'stub.out' },
    mysqlSink: { tables: [{ name: 'stub_rows', columns: ['n'], onDuplicate: { kind: 'ignore' } }] },
    epoch: { maxWaitMs: 100 },
    ...(over.epochsPerRun ? { epochsPerRun: over.epochsPerRun } : {}),
    ...(over.parallelism ? { parallelism: over.parallelism } : {}),
  });
  return over.twoActivityLoop
    ? { ...spec, epoch: { ...spec.epoch, commitWithNextPrepare: false } as PipelineSpec['epoch'] }
    : spec;
}

/** Runs one workflow (and the runs it continues as) to its end on a worker with these activities. A loop that never ends fails at the 30 s execution timeout. */
async function run<I, R>(
  workflow: (input: I) => Promise<R>,
  input: I,
  activities: object,
  workflowId = uniqueName('wft'),
): Promise<R> {
  if (!env) throw new Error('the test environment did not start');
  const taskQueue = uniqueName('wft-tq');
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    activities,
    ...workflowCode(),
    shutdownGraceTime: '1s',
  });
  const handle = await env.client.workflow.start(workflow, {
    taskQueue,
    workflowId,
    args: [input],
    workflowExecutionTimeout: '30s',
  });
  return worker.runUntil(handle.result());
}

const state = (s: Partial<PartitionState> & { epoch: number; offset: number }): PartitionState => ({
  committedEpochs: 0,
  records: 0,
  deadLetters: 0,
  redos: 0,
  mysqlRedos: 0,
  ...s,
});

test('legacy partition loop (no SourceRef): epochs are prepared, decided and committed in order until the source is drained', async () => {
  const spec = stubSpec();
  const stubs = partitionStubs({ sourceEnd: 30, perEpoch: 10 });
  const result = await run(partitionWorkflow, { spec, partition: 3, control: DRAIN }, stubs.activities);

  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0@0',
    'advance 0 → 1@10',
    'advance 1 → 2@20',
    'advance 2 → empty',
  ]);
  // Each commit is handed the decision its prepare returned (from history), and every prepare of a draining run does not wait.
  const advanced = stubs.args
    .filter((c) => c.name === 'advanceEpoch')
    .map((c) => c.args as { prepared: { start: number; end: number; xid: string } });
  assert.deepEqual(
    advanced.map((a) => [a.prepared.start, a.prepared.end, a.prepared.xid]),
    [
      [0, 10, 'xid-0'],
      [10, 20, 'xid-1'],
      [20, 30, 'xid-2'],
    ],
  );
  for (const { name, args } of stubs.args) {
    const a = args as { spec: PipelineSpec; partition: number; noWait?: boolean };
    assert.equal(a.spec.name, spec.name, name);
    assert.equal(a.partition, 3, name);
    if (name === 'prepareEpoch' || name === 'advanceEpoch') assert.equal(a.noWait, true, `${name} of a draining run`);
  }
  assert.deepEqual(result, {
    pipeline: spec.name,
    partition: 3,
    reason: 'drained',
    state: state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30 }),
  });
});

test("legacy partition loop (no SourceRef): the run starts at reconcile's epoch and offset", async () => {
  const spec = stubSpec();
  const stubs = partitionStubs({ sourceEnd: 90, perEpoch: 10, reconcile: () => ({ epoch: 7, offset: 70 }) });
  const result = await run(partitionWorkflow, { spec, partition: 0, control: DRAIN }, stubs.activities);

  assert.deepEqual(stubs.calls, ['reconcile fresh', 'prepare 7@70', 'advance 7 → 8@80', 'advance 8 → empty']);
  assert.deepEqual(result.state, state({ epoch: 9, offset: 90, committedEpochs: 2, records: 20 }));
});

test('legacy partition loop (no SourceRef): an epoch whose Kafka commit the broker aborted is redone before the next epoch is prepared', async () => {
  const spec = stubSpec();
  const stubs = partitionStubs({ sourceEnd: 30, perEpoch: 10, aborted: [1], mysqlRedone: [2] });
  const result = await run(partitionWorkflow, { spec, partition: 0, control: DRAIN }, stubs.activities);

  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0@0',
    'advance 0 → 1@10',
    'advance 1 → withdrawn',
    'redo 1',
    'prepare 2@20',
    'advance 2 → empty',
  ]);
  const redo = stubs.args.find((c) => c.name === 'redoKafka')?.args as {
    prepared: { epoch: number; start: number; end: number; xid: string };
  };
  assert.deepEqual(
    [redo.prepared.epoch, redo.prepared.start, redo.prepared.end, redo.prepared.xid],
    [1, 10, 20, 'xid-1'],
  );
  // A MySQL side redone inside the commit (epoch 2) is only counted.
  assert.deepEqual(
    result.state,
    state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30, redos: 1, mysqlRedos: 1 }),
  );
});

test('legacy partition loop, two-activity: a prepared next epoch is withdrawn before the aborted one is redone, then prepared again', async () => {
  const spec = stubSpec({ twoActivityLoop: true });
  const stubs = partitionStubs({ sourceEnd: 30, perEpoch: 10, aborted: [1] });
  const result = await run(partitionWorkflow, { spec, partition: 0, control: DRAIN }, stubs.activities);

  // commit e and prepare e+1 run at once, so only these orders are fixed:
  const c = stubs.calls;
  assert.deepEqual(c.slice(0, 2), ['reconcile fresh', 'prepare 0@0']);
  assert.deepEqual(
    [...c].sort(),
    [
      'reconcile fresh',
      'prepare 0@0',
      'commit 0',
      'prepare 1@10',
      'commit 1',
      'prepare 2@20',
      'withdraw 2',
      'redo 1',
      'prepare 2@20',
      'commit 2',
      'prepare 3@30',
    ].sort(),
  );
  const at = (line: string, from = 0) => c.indexOf(line, from);
  assert.ok(at('prepare 1@10') > at('prepare 0@0') && at('commit 1') > at('commit 0'), c.join(', '));
  assert.ok(
    at('withdraw 2') > at('commit 1') && at('withdraw 2') > at('prepare 2@20'),
    `e+1 withdrawn after e's commit came back aborted: ${c.join(', ')}`,
  );
  assert.deepEqual(
    c.slice(at('withdraw 2'), at('withdraw 2') + 3),
    ['withdraw 2', 'redo 1', 'prepare 2@20'],
    `withdraw e+1, redo e, prepare e+1 again: ${c.join(', ')}`,
  );
  // The overlapping prepare waits for the previous epoch's commit (afterCommitOf); the one after the redo does not overlap.
  const prepares = stubs.args
    .filter((x) => x.name === 'prepareEpoch')
    .map((x) => x.args as { epoch: number; afterCommitOf?: number });
  assert.deepEqual(
    prepares.map((p) => [p.epoch, p.afterCommitOf]),
    [
      [0, undefined],
      [1, 0],
      [2, 1],
      [2, undefined],
      [3, 2],
    ],
  );
  assert.deepEqual(result.state, state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30, redos: 1 }));
});

test('legacy partition loop (no SourceRef): a stop while an epoch is in flight ends the run at the next boundary with every prepared epoch committed', async () => {
  const spec = stubSpec();
  const workflowId = uniqueName('wft');
  const stubs = partitionStubs({
    sourceEnd: 1000,
    perEpoch: 10,
    duringAdvance: async (a) => {
      if (a.prepared.epoch === 1) await env!.client.workflow.getHandle(workflowId).signal(controlSignal, 'stop');
    },
  });
  const result = await run(partitionWorkflow, { spec, partition: 0 }, stubs.activities, workflowId);

  // Epoch 2 was prepared with epoch 1's commit: it is committed on its own, and nothing after it is prepared.
  assert.deepEqual(stubs.calls, ['reconcile fresh', 'prepare 0@0', 'advance 0 → 1@10', 'advance 1 → 2@20', 'commit 2']);
  assert.equal(result.reason, 'stopped');
  assert.deepEqual(result.state, state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30 }));
});

test("legacy partition loop (no SourceRef): continue-as-new carries the state into the next run's reconcile", async () => {
  const spec = stubSpec({ epochsPerRun: 2 });
  const stubs = partitionStubs({ sourceEnd: 50, perEpoch: 10, aborted: [3] });
  const result = await run(partitionWorkflow, { spec, partition: 0, control: DRAIN }, stubs.activities);

  // The last epoch of a run commits on its own (nothing prepared crosses continue-as-new); a redo in run 2 is counted in the end.
  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0@0',
    'advance 0 → 1@10',
    'commit 1',
    'reconcile expected=2@20',
    'prepare 2@20',
    'advance 2 → 3@30',
    'commit 3',
    'redo 3',
    'reconcile expected=4@40',
    'prepare 4@40',
    'advance 4 → empty',
  ]);
  assert.deepEqual(result, {
    pipeline: spec.name,
    partition: 0,
    reason: 'drained',
    state: state({ epoch: 5, offset: 50, committedEpochs: 5, records: 50, redos: 1 }),
  });
});

const members = (spec: PipelineSpec, ids: number[]): GroupMember[] =>
  ids.map((id) => ({
    id,
    source: { topic: spec.source.topic, partition: id, outputPartitions: 1, deadLetterPartitions: 1 },
  }));
const source = (spec: PipelineSpec, id: number) => members(spec, [id])[0]!.source!;

test('engine, group of one: epochs are prepared, decided and committed in order until drained, with the partition as the unit', async () => {
  const spec = stubSpec();
  const stubs = engineStubs({ sourceEnd: { 3: 30 }, perEpoch: 10 });
  const result = await run(
    partitionWorkflow,
    { spec, partition: 3, source: source(spec, 3), control: DRAIN },
    stubs.activities,
  );

  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 3:0@0',
    'advance 0 → 3:1@10',
    'advance 1 → 3:2@20',
    'advance 2 → empty',
  ]);
  // Each commit is handed the decision its prepare returned (from history); every call names the partition as a group of one; a draining run never waits.
  const advanced = stubs.args
    .filter((c) => c.name === 'advanceMembers')
    .map((c) => c.args as { prepared: { members: { start: number; end: number }[]; xid: string } });
  assert.deepEqual(
    advanced.map((a) => [a.prepared.members[0]!.start, a.prepared.members[0]!.end, a.prepared.xid]),
    [
      [0, 10, 'xid-0'],
      [10, 20, 'xid-1'],
      [20, 30, 'xid-2'],
    ],
  );
  for (const { name, args } of stubs.args) {
    const a = args as { spec: PipelineSpec; group: number; solo?: boolean; members: GroupMember[]; noWait?: boolean };
    assert.deepEqual([a.spec.name, a.group, a.solo, a.members.map((m) => m.id)], [spec.name, 3, true, [3]], name);
    if (name === 'prepareMembers' || name === 'advanceMembers')
      assert.equal(a.noWait, true, `${name} of a draining run`);
  }
  assert.deepEqual(result, {
    pipeline: spec.name,
    partition: 3,
    reason: 'drained',
    state: state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30 }),
  });
});

test("engine, group of one: the unit's epoch is the partition's epoch from reconcile", async () => {
  const spec = stubSpec();
  const stubs = engineStubs({ sourceEnd: { 0: 90 }, perEpoch: 10, reconcile: () => [{ id: 0, epoch: 7, offset: 70 }] });
  const result = await run(
    partitionWorkflow,
    { spec, partition: 0, source: source(spec, 0), control: DRAIN },
    stubs.activities,
  );

  assert.deepEqual(stubs.calls, ['reconcile fresh', 'prepare 7 0:7@70', 'advance 7 → 0:8@80', 'advance 8 → empty']);
  assert.deepEqual(result.state, state({ epoch: 9, offset: 90, committedEpochs: 2, records: 20 }));
});

test('engine, group of one: an aborted epoch is redone (its prepared successor withdrawn inside the advance) before the next is prepared', async () => {
  const spec = stubSpec();
  const stubs = engineStubs({ sourceEnd: { 0: 30 }, perEpoch: 10, aborted: [1], mysqlRedone: [2] });
  const result = await run(
    partitionWorkflow,
    { spec, partition: 0, source: source(spec, 0), control: DRAIN },
    stubs.activities,
  );

  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 0:0@0',
    'advance 0 → 0:1@10',
    'advance 1 → withdrawn',
    'redo 1',
    'prepare 2 0:2@20',
    'advance 2 → empty',
  ]);
  const redo = stubs.args.find((c) => c.name === 'redoMembers')?.args as {
    prepared: { groupEpoch: number; members: { start: number; end: number }[]; xid: string };
  };
  assert.deepEqual(
    [redo.prepared.groupEpoch, redo.prepared.members[0]!.start, redo.prepared.members[0]!.end, redo.prepared.xid],
    [1, 10, 20, 'xid-1'],
  );
  // A MySQL side redone inside the commit (epoch 2) is only counted.
  assert.deepEqual(
    result.state,
    state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30, redos: 1, mysqlRedos: 1 }),
  );
});

test('engine, group of one: a stop while an epoch is in flight ends the run at the next boundary with every prepared epoch committed', async () => {
  const spec = stubSpec();
  const workflowId = uniqueName('wft');
  const stubs = engineStubs({
    sourceEnd: { 0: 1000 },
    perEpoch: 10,
    duringAdvance: async (a) => {
      if (a.prepared.groupEpoch === 1) await env!.client.workflow.getHandle(workflowId).signal(controlSignal, 'stop');
    },
  });
  const result = await run(
    partitionWorkflow,
    { spec, partition: 0, source: source(spec, 0) },
    stubs.activities,
    workflowId,
  );

  // Epoch 2 was prepared with epoch 1's commit: it is committed on its own, and nothing after it is prepared.
  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 0:0@0',
    'advance 0 → 0:1@10',
    'advance 1 → 0:2@20',
    'commit 2',
  ]);
  assert.equal(result.reason, 'stopped');
  assert.deepEqual(result.state, state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30 }));
});

test("engine, group of one: continue-as-new carries the state into the next run's reconcile", async () => {
  const spec = stubSpec({ epochsPerRun: 2 });
  const stubs = engineStubs({ sourceEnd: { 0: 50 }, perEpoch: 10, aborted: [3] });
  const result = await run(
    partitionWorkflow,
    { spec, partition: 0, source: source(spec, 0), control: DRAIN },
    stubs.activities,
  );

  // The last epoch of a run commits on its own (nothing prepared crosses continue-as-new); a redo in run 2 is counted in the end.
  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 0:0@0',
    'advance 0 → 0:1@10',
    'commit 1',
    'reconcile expected=0:2@20',
    'prepare 2 0:2@20',
    'advance 2 → 0:3@30',
    'commit 3',
    'redo 3',
    'reconcile expected=0:4@40',
    'prepare 4 0:4@40',
    'advance 4 → empty',
  ]);
  assert.deepEqual(result, {
    pipeline: spec.name,
    partition: 0,
    reason: 'drained',
    state: state({ epoch: 5, offset: 50, committedEpochs: 5, records: 50, redos: 1 }),
  });
});

test("engine, partition group: epochs are prepared and committed for every member from reconcile's positions until drained", async () => {
  const spec = stubSpec({ parallelism: 2 });
  const stubs = engineStubs({
    sourceEnd: { 0: 20, 2: 35 },
    perEpoch: 10,
    reconcile: () => [
      { id: 0, epoch: 0, offset: 0 },
      { id: 2, epoch: 3, offset: 5 },
    ],
  });
  const results = await run(
    groupWorkflow,
    { spec, group: 0, members: members(spec, [0, 2]), control: DRAIN },
    stubs.activities,
  );

  // Member 0 runs out after two group epochs; member 2 alone makes the third.
  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 0:0@0 2:3@5',
    'advance 0 → 0:1@10 2:4@15',
    'advance 1 → 2:5@25',
    'advance 2 → empty',
  ]);
  for (const { name, args } of stubs.args)
    assert.deepEqual([(args as { group: number }).group, (args as { solo?: boolean }).solo], [0, undefined], name);
  assert.deepEqual(results, [
    {
      pipeline: spec.name,
      partition: 0,
      reason: 'drained',
      state: state({ epoch: 2, offset: 20, committedEpochs: 2, records: 20 }),
    },
    {
      pipeline: spec.name,
      partition: 2,
      reason: 'drained',
      state: state({ epoch: 6, offset: 35, committedEpochs: 3, records: 30 }),
    },
  ]);
});

test('engine, partition group: an aborted group epoch is redone before the next is prepared', async () => {
  const spec = stubSpec({ parallelism: 2 });
  const stubs = engineStubs({ sourceEnd: { 1: 20 }, perEpoch: 10, aborted: [0] });
  const results = await run(
    groupWorkflow,
    { spec, group: 1, members: members(spec, [1]), control: DRAIN },
    stubs.activities,
  );

  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 1:0@0',
    'advance 0 → withdrawn',
    'redo 0',
    'prepare 1 1:1@10',
    'advance 1 → empty',
  ]);
  assert.deepEqual(
    results.map((r) => r.state),
    [state({ epoch: 2, offset: 20, committedEpochs: 2, records: 20, redos: 1 })],
  );
});

test("engine, partition group: continue-as-new carries the group epoch and every member's state into the next run", async () => {
  const spec = stubSpec({ parallelism: 2, epochsPerRun: 2 });
  const stubs = engineStubs({ sourceEnd: { 1: 30, 3: 30 }, perEpoch: 10, aborted: [1] });
  const results = await run(
    groupWorkflow,
    { spec, group: 1, members: members(spec, [1, 3]), control: DRAIN },
    stubs.activities,
  );

  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 1:0@0 3:0@0',
    'advance 0 → 1:1@10 3:1@10',
    'commit 1',
    'redo 1',
    'reconcile expected=1:2@20 3:2@20',
    'prepare 2 1:2@20 3:2@20',
    'advance 2 → empty',
  ]);
  const after = state({ epoch: 3, offset: 30, committedEpochs: 3, records: 30, redos: 1 });
  assert.deepEqual(results, [
    { pipeline: spec.name, partition: 1, reason: 'drained', state: after },
    { pipeline: spec.name, partition: 3, reason: 'drained', state: after },
  ]);
});

test('engine, partition group: a partition that joins while an epoch is in flight is reconciled at the next boundary, with nothing in flight, and then takes part', async () => {
  const spec = stubSpec({ parallelism: 2 });
  const workflowId = uniqueName('wft');
  const stubs = engineStubs({
    sourceEnd: { 0: 30, 2: 20 },
    perEpoch: 10,
    duringAdvance: async (a) => {
      if (a.prepared.groupEpoch === 0)
        await env!.client.workflow.getHandle(workflowId).signal(addMembersSignal, members(spec, [2]));
    },
  });
  const results = await run(
    groupWorkflow,
    { spec, group: 0, members: members(spec, [0]), control: DRAIN },
    stubs.activities,
    workflowId,
  );

  // Epoch 1 came prepared with epoch 0's commit: it commits alone (no overlap while a member waits to join), then the join, then both members.
  assert.deepEqual(stubs.calls, [
    'reconcile fresh',
    'prepare 0 0:0@0',
    'advance 0 → 0:1@10',
    'commit 1',
    'reconcile joining 2',
    'prepare 2 0:2@20 2:0@0',
    'advance 2 → 2:1@10',
    'advance 3 → empty',
  ]);
  assert.deepEqual(
    results.map((r) => [r.partition, r.state.offset, r.state.committedEpochs]),
    [
      [0, 30, 3],
      [2, 20, 2],
    ],
  );
});
