/**
 * The exactly-once engine on the real services: the original scenario, a worker killed
 * between prepare and commit, a broker transaction timeout before commit, and a retried
 * epoch that must leave no prepared XA branch behind.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from '@temporalio/worker';
import { Faults, parseFaults } from '../src/faults';
import { partitionWorkflowId } from '../src/spec';
import { createOnceflowWorker } from '../src/worker';
import { openDeps, quietRuntime, spawnWorker, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

const bundle = () => {
  const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  if (!codePath) throw new Error('ONCEFLOW_WORKFLOW_BUNDLE is not set; run the tests with npm test');
  return { codePath };
};

test('the original scenario: failing compare sink, every input exactly once in Kafka and MySQL', { timeout: 240_000 }, async () => {
  const s = await prepareScenario(deps, { prefix: 'scenario', records: 1200, partitions: 3, poisonEvery: 300, transformOptions: { compareFailAfter: 10, compareFailEveryNthEpoch: 2 } });
  const w = await createOnceflowWorker({ settings: deps.settings, taskQueue: s.taskQueue, worker: { workflowBundle: bundle() } });
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

    // Replay the recorded history of a partition workflow with the current code.
    const history = await deps.client.workflow.getHandle(partitionWorkflowId(s.spec.name, 0)).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: bundle() }, history, partitionWorkflowId(s.spec.name, 0));
    if (process.env.ONCEFLOW_RECORD_HISTORIES) {
      const dir = join(__dirname, 'histories');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'partition-compare-sink-retries.json'), JSON.stringify(history, null, 1));
    }
  } finally {
    w.shutdown();
    await running;
  }
});

test('a worker killed with SIGKILL after prepare and before commit: a new worker process commits, output exactly once', { timeout: 240_000 }, async () => {
  const s = await prepareScenario(deps, { prefix: 'kill', records: 400, partitions: 1 });
  const doomed = spawnWorker(s.taskQueue, { ONCEFLOW_FAULTS: 'commit.before@epoch=1@partition=0:crash', ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
  const handle = await start(deps, s);
  const code = await doomed.exited;
  assert.equal(code, -1, 'the first worker died of SIGKILL at commit.before');
  const second = spawnWorker(s.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
  try {
    const [result] = await drainAndWait(deps, s, handle);
    assert.ok(result);
    // The transaction the dead worker prepared was committed by the new one (no redo needed).
    assert.equal(result.state.redos, 0);
    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(report.totals.outputs, 400);
  } finally {
    second.kill('SIGTERM');
    await second.exited;
  }
});

test('a Kafka transaction aborted by the broker (timeout) before commit is redone; MySQL not doubled', { timeout: 240_000 }, async () => {
  const s = await prepareScenario(deps, { prefix: 'timeout', records: 300, partitions: 1, transactionTimeoutMs: 3000 });
  const doomed = spawnWorker(s.taskQueue, { ONCEFLOW_FAULTS: 'commit.before@epoch=1@partition=0:crash', ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
  const handle = await start(deps, s);
  assert.equal(await doomed.exited, -1);
  // The commit activity is retried only after its heartbeat timeout (10 s), well past the 3 s
  // transaction timeout: by then the broker has aborted the prepared transaction.
  const second = spawnWorker(s.taskQueue, { ONCEFLOW_WORKFLOW_BUNDLE: bundle().codePath });
  try {
    const [result] = await drainAndWait(deps, s, handle);
    assert.ok(result);
    assert.equal(result.state.redos, 1, 'epoch 1 was redone after the broker aborted it');
    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(report.totals.outputs, 300);
    assert.ok(report.totals.abortedCopies >= 100, 'the aborted copy of epoch 1 is visible to read_uncommitted');
  } finally {
    second.kill('SIGTERM');
    await second.exited;
  }
});

test('an epoch retried after a failure past XA PREPARE leaves no prepared XA branch behind', { timeout: 240_000 }, async () => {
  const s = await prepareScenario(deps, { prefix: 'xaleft', records: 300, partitions: 2 });
  const faults = new Faults(parseFaults('prepare.xa-prepared@epoch=0@attempt=1:throw,prepare.xa-prepared@epoch=1@attempt=1:throw'));
  const rolledBack: string[] = [];
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    faults,
    worker: { workflowBundle: bundle() },
    observe: (e) => void (e.kind === 'rolled-back' && rolledBack.push(e.xid)),
  });
  const running = w.run();
  try {
    const handle = await start(deps, s);
    await drainAndWait(deps, s, handle);
    // Each failed first attempt left a prepared branch, which the retry rolled back: 2 epochs × 2 partitions.
    assert.equal(rolledBack.length, 4, `rolled back: ${rolledBack.join(', ')}`);
    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(report.totals.preparedXaBranches, 0);
    assert.equal(report.totals.outputs, 300);
  } finally {
    w.shutdown();
    await running;
  }
});
