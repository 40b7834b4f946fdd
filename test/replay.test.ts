/**
 * Replay tests: histories recorded from real runs (retries after the failing compare sink, a
 * redo after a broker-aborted transaction, continue-as-new) must replay with the current
 * workflow code; a deliberately nondeterministic change must be caught.
 *
 * Re-record with: ONCEFLOW_RECORD_HISTORIES=1 npm test -- test/engine.test.ts (writes partition-*.json).
 * Pipeline workflows (test/histories/pipeline/, recorded by test/sources.test.ts with the same
 * variable): the discovery loop behind source-discovery-v1, continued as new, and a partition
 * workflow started by it; and one with partition groups (test/groups.test.ts). Group workflows:
 * test/histories/group/, recorded by test/groups.test.ts; v1-ends-*.json (there and in pipeline/)
 * were recorded before a group told its pipeline its members' ends in one signal (group-ends-v1).
 * Older generations are kept to guard the patches: sequential-*.json were recorded before the
 * pipelined loop, v1-pipelined-*.json before the single commit activity (commit-epoch-v1),
 * v2-commit-epoch-*.json before commit and next prepare became one activity (advance-epoch-v1),
 * v3-advance-epoch-*.json (here and in pipeline/) and group/v2-ends-*.json before the epoch search
 * attribute was held to one update per interval (epoch-attribute-v1), v4-pre-engine-*.json,
 * group/v3-pre-engine-*.json and pipeline/v1-pre-engine-*.json before partitions and groups ran
 * the one engine (one-engine-v1: src/workflows/legacy/ replays them). The current ones are the
 * engine's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { DeterminismViolationError } from '@temporalio/workflow';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { COMMIT_ACTIVITIES, committedEpochs, LEGACY_COMMIT_ACTIVITIES, type HistoryEventLike } from '../src/history';
import { quietRuntime, workflowCode } from './support/env';

const dir = join(__dirname, 'histories');
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();
const load = (f: string) => historyFromJSON(JSON.parse(readFileSync(join(dir, f), 'utf8')));

test('checked-in histories cover retries, a redo and continue-as-new, for every generation of the loop', () => {
  const text = (f: string) => readFileSync(join(dir, f), 'utf8');
  const OLDER = ['sequential-', 'v1-pipelined-', 'v2-commit-epoch-', 'v3-advance-epoch-', 'v4-pre-engine-'];
  const generation = (prefix: string | null) =>
    files
      .filter((f) => (prefix ? f.startsWith(prefix) : !OLDER.some((p) => f.startsWith(p))))
      .map(text)
      .join('\n');
  const sequential = generation('sequential-');
  const pipelinedV1 = generation('v1-pipelined-');
  const commitEpoch = generation('v2-commit-epoch-');
  const advanceEpoch = generation('v3-advance-epoch-');
  const preEngine = generation('v4-pre-engine-');
  const current = generation(null);
  assert.ok(files.length >= 18, `histories: ${files.join(', ')}`);
  for (const [name, all] of [
    ['sequential', sequential],
    ['pipelined v1', pipelinedV1],
    ['commit epoch v2', commitEpoch],
    ['advance epoch v3', advanceEpoch],
    ['pre-engine v4', preEngine],
    ['current', current],
  ] as const) {
    assert.match(all, /compare sink failed/, `${name}: a history with failed prepare attempts`);
    assert.match(all, name === 'current' ? /"redoMembers"/ : /"redoKafka"/, `${name}: a history with a redo`);
    assert.match(all, /ContinuedAsNew/, `${name}: a history that continued as new`);
  }
  // Recorded before and after each patch: every branch of every patch replays.
  assert.deepEqual(patchIds(sequential), []);
  assert.deepEqual(patchIds(pipelinedV1), ['pipelined-epochs-v1']);
  assert.match(pipelinedV1, /"abortPrepared"/, 'pipelined v1: a withdrawn e+1 before a redo');
  assert.deepEqual(patchIds(commitEpoch), ['commit-epoch-v1', 'pipelined-epochs-v1']);
  assert.match(commitEpoch, /"commitEpoch"/);
  assert.doesNotMatch(commitEpoch, /"commitKafka"/);
  assert.match(commitEpoch, /"abortPrepared"/, 'commit epoch v2: a withdrawn e+1 before a redo');
  assert.deepEqual(patchIds(advanceEpoch), ['advance-epoch-v1', 'commit-epoch-v1', 'pipelined-epochs-v1']);
  assert.match(advanceEpoch, /"advanceEpoch"/);
  assert.ok(
    epochUpserts(advanceEpoch) >= epochsCommitted(advanceEpoch),
    'advance epoch v3: the epoch attribute upserted after every committed epoch',
  );
  assert.deepEqual(patchIds(preEngine), [
    'advance-epoch-v1',
    'commit-epoch-v1',
    'epoch-attribute-v1',
    'pipelined-epochs-v1',
  ]);
  assert.match(preEngine, /"advanceEpoch"/);
  assert.ok(
    epochUpserts(preEngine) < epochsCommitted(preEngine),
    'pre-engine v4: the epoch attribute held back between committed epochs',
  );
  // e+1 is withdrawn inside advanceEpoch; the loop schedules no abortPrepared any more.
  assert.doesNotMatch(preEngine, /"abortPrepared"/);
  // The engine asks only its own patch (and epoch-attribute-v1, in epochAttribute) and calls only the engine's activities.
  assert.deepEqual(patchIds(current), ['epoch-attribute-v1', 'one-engine-v1']);
  assert.match(current, /"advanceMembers"/);
  assert.doesNotMatch(current, /"(prepareEpoch|advanceEpoch|commitEpoch|redoKafka|reconcile)"/);
  assert.ok(
    epochUpserts(current) < epochsCommitted(current),
    'current: the epoch attribute held back between committed epochs',
  );
});

type JsonEvent = HistoryEventLike & {
  upsertWorkflowSearchAttributesEventAttributes?: { searchAttributes: { indexedFields: Record<string, unknown> } };
};

/** The events of each history in a '\n'-joined list of JSON histories (each file one JSON document). */
function eventsOf(histories: string): JsonEvent[][] {
  return histories.split(/\n(?=\{)/).map((h) => (JSON.parse(h) as { events: JsonEvent[] }).events);
}

/** Upserts of the OnceflowEpoch search attribute in JSON histories. */
function epochUpserts(histories: string): number {
  return eventsOf(histories)
    .flat()
    .filter(
      (e) =>
        e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes.indexedFields.OnceflowEpoch !== undefined,
    ).length;
}

/** Epochs committed in JSON histories of partition or group workflows (the benchmark's count). */
function epochsCommitted(histories: string): number {
  return committedEpochs(eventsOf(histories), [...COMMIT_ACTIVITIES, ...LEGACY_COMMIT_ACTIVITIES]);
}

/** Ids of the patches (core_patch markers) in JSON histories, sorted and distinct. */
function patchIds(histories: string): string[] {
  const ids = new Set<string>();
  for (const m of histories.matchAll(/"patch-data":\s*\{\s*"payloads":\s*\[\s*\{[^}]*\}\s*,\s*"data":\s*"([^"]+)"/g)) {
    ids.add((JSON.parse(Buffer.from(m[1]!, 'base64').toString('utf8')) as { id: string }).id);
  }
  return [...ids].sort();
}

test('every recorded history replays with the current workflow code', async () => {
  quietRuntime();
  for (const f of files) {
    await Worker.runReplayHistory(workflowCode(), load(f), f);
  }
});

test('a nondeterministic change of the partition workflow is caught by replay', async () => {
  quietRuntime();
  const { code } = await bundleWorkflowCode({ workflowsPath: require.resolve('./workflows/nondeterministic') });
  const f = files.find((x) => x.includes('compare-sink-retries'))!;
  await assert.rejects(Worker.runReplayHistory({ workflowBundle: { code } }, load(f), f), (e: unknown) => {
    assert.ok(e instanceof DeterminismViolationError, `expected a DeterminismViolationError, got ${String(e)}`);
    return true;
  });
});

const groupDir = join(dir, 'group');
const groupFiles = readdirSync(groupDir)
  .filter((f) => f.endsWith('.json'))
  .sort();

test('recorded partition-group histories (retries, a per-partition redo, continue-as-new, a partition joining) replay with the current workflow code', async () => {
  quietRuntime();
  const generation = (prefix: string | null) =>
    groupFiles
      .filter((f) => (prefix ? f.startsWith(prefix) : !/^v\d+-/.test(f)))
      .map((f) => readFileSync(join(groupDir, f), 'utf8'))
      .join('\n');
  const [v1, v2, v3, current] = [
    generation('v1-ends-'),
    generation('v2-ends-'),
    generation('v3-pre-engine-'),
    generation(null),
  ];
  // Recorded before group-ends-v1, before epoch-attribute-v1, before one-engine-v1 and since: every branch of the patches replays.
  for (const [name, all] of [
    ['before group-ends-v1', v1],
    ['before epoch-attribute-v1', v2],
    ['before one-engine-v1', v3],
    ['current', current],
  ] as const) {
    assert.match(all, /compare sink failed/, `${name}: a group epoch with failed prepare attempts`);
    assert.match(
      all,
      name === 'current' ? /"redoMembers"/ : /"redoGroupKafka"/,
      `${name}: a broker-aborted group transaction redone`,
    );
    assert.match(all, /ContinuedAsNew/, `${name}: a group run that continued as new`);
    assert.match(all, /"addMembers"/, `${name}: a partition that joined a running group`);
  }
  assert.deepEqual(patchIds(v1), []);
  assert.match(v1, /"partitionEnded"/, 'before: one signal per member');
  for (const all of [v2, v3, current]) {
    assert.match(all, /"partitionsEnded"/, "since group-ends-v1: the members' ends in one signal");
    assert.doesNotMatch(all, /"partitionEnded"/);
  }
  assert.deepEqual(patchIds(v2), ['group-ends-v1']);
  assert.ok(
    epochUpserts(v2) >= epochsCommitted(v2),
    'before epoch-attribute-v1: an upsert after every committed group epoch',
  );
  assert.deepEqual(patchIds(v3), ['epoch-attribute-v1', 'group-ends-v1']);
  assert.ok(
    epochUpserts(v3) < epochsCommitted(v3),
    'before one-engine-v1: the epoch attribute held back between committed group epochs',
  );
  assert.deepEqual(patchIds(current), ['epoch-attribute-v1', 'one-engine-v1']);
  assert.match(current, /"advanceMembers"/);
  assert.doesNotMatch(current, /"(prepareGroup|advanceGroup|commitGroup|redoGroupKafka|reconcileGroup)"/);
  assert.ok(
    epochUpserts(current) < epochsCommitted(current),
    'current: the epoch attribute held back between committed group epochs',
  );
  for (const f of groupFiles) {
    await Worker.runReplayHistory(
      workflowCode(),
      historyFromJSON(JSON.parse(readFileSync(join(groupDir, f), 'utf8'))),
      f,
    );
  }
});

const pipelineDir = join(dir, 'pipeline');
const pipelineFiles = readdirSync(pipelineDir)
  .filter((f) => f.endsWith('.json'))
  .sort();

test('recorded pipeline histories (partition discovery, continue-as-new) replay with the current workflow code', async () => {
  quietRuntime();
  const all = pipelineFiles.map((f) => readFileSync(join(pipelineDir, f), 'utf8')).join('\n');
  assert.deepEqual(
    patchIds(all).filter((p) => p === 'source-discovery-v1'),
    ['source-discovery-v1'],
  );
  assert.match(all, /ContinuedAsNew/, 'a pipeline run that continued as new');
  assert.match(all, /"partitionEnded"/, 'a partition reporting its end by signal');
  assert.match(all, /"partitionsEnded"/, "a group reporting its members' ends in one signal");
  assert.ok(
    patchIds(all).includes('restart-halted-v1'),
    'a pipeline that restarted a halted partition (test/deadletter.test.ts)',
  );
  for (const f of pipelineFiles) {
    await Worker.runReplayHistory(
      workflowCode(),
      historyFromJSON(JSON.parse(readFileSync(join(pipelineDir, f), 'utf8'))),
      f,
    );
  }
});
