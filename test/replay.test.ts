/**
 * Replay tests: histories recorded from real runs (retries after the failing compare sink, a
 * redo after a broker-aborted transaction, continue-as-new) must replay with the current
 * workflow code; a deliberately nondeterministic change must be caught.
 *
 * Re-record with: ONCEFLOW_RECORD_HISTORIES=1 npm test -- test/engine.test.ts (writes partition-*.json;
 * sequential-*.json were recorded before the pipelined loop and are kept to guard its patch).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { DeterminismViolationError } from '@temporalio/workflow';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { quietRuntime } from './support/env';

const dir = join(__dirname, 'histories');
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
const load = (f: string) => historyFromJSON(JSON.parse(readFileSync(join(dir, f), 'utf8')));

function currentBundle() {
  const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  return codePath ? { workflowBundle: { codePath } } : { workflowsPath: require.resolve('../src/workflows') };
}

test('checked-in histories cover retries, a redo and continue-as-new, for the sequential and the pipelined loop', () => {
  const text = (f: string) => readFileSync(join(dir, f), 'utf8');
  const sequential = files.filter((f) => f.startsWith('sequential-')).map(text).join('\n');
  const pipelined = files.filter((f) => !f.startsWith('sequential-')).map(text).join('\n');
  assert.ok(files.length >= 6, `histories: ${files.join(', ')}`);
  for (const [name, all] of [['sequential', sequential], ['pipelined', pipelined]] as const) {
    assert.match(all, /compare sink failed/, `${name}: a history with failed prepare attempts`);
    assert.match(all, /"redoKafka"/, `${name}: a history with a redo`);
    assert.match(all, /ContinuedAsNew/, `${name}: a history that continued as new`);
  }
  // Recorded before and after patched('pipelined-epochs-v1'): both branches of the patch replay.
  assert.doesNotMatch(sequential, /core_patch/);
  assert.match(pipelined, /core_patch/);
  assert.match(pipelined, /"abortPrepared"/, 'pipelined: a withdrawn e+1 before a redo');
});

test('every recorded history replays with the current workflow code', async () => {
  quietRuntime();
  for (const f of files) {
    await Worker.runReplayHistory(currentBundle(), load(f), f);
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
