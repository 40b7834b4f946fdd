/**
 * A transaction Kafka splits (docs/design.md §6.15): committed on some of the partitions it
 * wrote and aborted on the others, as a coordinator acting on a term it had lost did on the
 * 3-node cluster (docs/cluster-run9.md). The fault `split=…` reproduces the stale coordinator's
 * act on the real broker — WriteTxnMarkers(COMMIT) to some partitions, then the real
 * coordinator aborts the transaction — right before the epoch's EndTxn(commit), which then
 * answers that the transaction is not open any more: the ambiguous path.
 *
 *  - split=outputs: outputs and dead letters committed, progress markers aborted. Judged by the
 *    marker alone (before this fix) the epoch was redone whole: duplicates.
 *  - split=markers: markers committed, outputs aborted. Judged by the marker alone the epoch
 *    was taken as committed: records lost.
 * With the fix both come out exactly once, ungrouped and in a partition group, and the split is
 * reported (the worker's `split` event, which the metric counts, naming what committed).
 *
 * And where no history names the transaction: the split happens, the worker dies before it
 * could judge the commit and the operator terminates the pipeline. `onceflow transactions`
 * lists the split (found from the log), and the restarted pipeline's reconcile repairs it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ObservedEvent } from '../src/activities/observe';
import { main } from '../src/cli';
import { groupWorkflowId, partitionWorkflowId, pipelineWorkflowId } from '../src/spec';
import type { KafkaSplit } from '../src/protocol';
import { createOnceflowWorker } from '../src/worker';
import { compareTransforms } from '../examples/flink-compare/transforms';
import {
  assertFired,
  bundle,
  faultFired,
  faultLine,
  openDeps,
  quietRuntime,
  recordedFaults,
  spawnWorker,
  type Deps,
} from './support/env';
import { drainAndWait, failedChecks, prepareScenario, runToEnd, start, verify } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

async function splitRun(commits: 'markers' | 'outputs', parallelism?: number) {
  // One poison record in 7 (14% of every epoch): an explicit dead-letter budget above that.
  const s = await prepareScenario(deps, {
    prefix: `split-${commits}${parallelism ? '-g' : ''}`,
    records: 600,
    partitions: 2,
    poisonEvery: 7,
    deadLetter: { maxRatio: 0.2 },
    ...(parallelism ? { parallelism } : {}),
  });
  const splits: KafkaSplit[] = [];
  const redos: ObservedEvent[] = [];
  const { faults, lines } = recordedFaults(`commit.before@epoch=1@partition=0@attempt=1:split=${commits}`);
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: compareTransforms(),
    // Ungrouped: partition 0's epoch 1; grouped: group 0's group epoch 1.
    faults,
    observe: (e) => {
      if (e.kind === 'split') splits.push(e.split);
      if (e.kind === 'redo') redos.push(e);
    },
    worker: { workflowBundle: bundle() },
  });
  const running = w.run();
  try {
    const handle = await start(deps, s);
    const results = await drainAndWait(deps, s, handle);
    // The split is the one the fault made, at that epoch's commit (a single broker splits nothing on its own).
    assertFired(lines, faultLine(`split=${commits}`, 'commit.before@epoch=1@partition=0@attempt=1'), 'the worker');
    const report = await verify(deps, s);
    return { s, results, report, splits, redos };
  } finally {
    w.shutdown();
    await running;
  }
}

for (const parallelism of [undefined, 1]) {
  const mode = parallelism ? 'in a partition group' : 'ungrouped';
  test(
    `a split with the outputs committed and the marker aborted (${mode}): the marker is written again, the outputs not — no duplicates`,
    { timeout: 240_000 },
    async () => {
      const { report, splits, redos, results } = await splitRun('outputs', parallelism);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs + report.totals.deadLetters, 600);
      assert.ok(
        splits.length >= 1 && new Set(splits.map((x) => `${x.producerId}/${x.producerEpoch}`)).size === 1,
        `one transaction split, reported for each epoch it covered: ${JSON.stringify(splits)}`,
      );
      const split = splits[0]!;
      assert.ok(
        split.committed.every((p) => !p.startsWith('onceflow.progress.')) && split.committed.length > 0,
        `outputs committed: ${split.committed.join(', ')}`,
      );
      assert.ok(
        split.aborted.length > 0 && split.aborted.every((p) => p.startsWith('onceflow.progress.')),
        `markers aborted: ${split.aborted.join(', ')}`,
      );
      assert.ok(
        redos.some((e) => e.kind === 'redo'),
        'the aborted parts were redone',
      );
      assert.ok(results.some((r) => r.state.redos >= 1));
    },
  );

  test(
    `a split with the marker committed and the outputs aborted (${mode}): the outputs are written again, not skipped — nothing missing`,
    { timeout: 240_000 },
    async () => {
      const { report, splits, results } = await splitRun('markers', parallelism);
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.outputs + report.totals.deadLetters, 600);
      assert.ok(
        splits.length >= 1 && new Set(splits.map((x) => `${x.producerId}/${x.producerEpoch}`)).size === 1,
        `one transaction split, reported for each epoch it covered: ${JSON.stringify(splits)}`,
      );
      const split = splits[0]!;
      assert.ok(
        split.committed.length > 0 && split.committed.every((p) => p.startsWith('onceflow.progress.')),
        `markers committed: ${split.committed.join(', ')}`,
      );
      assert.ok(
        split.aborted.some((p) => !p.startsWith('onceflow.progress.')),
        `outputs aborted: ${split.aborted.join(', ')}`,
      );
      assert.ok(results.some((r) => r.state.redos >= 1));
    },
  );
}

/** Splits epoch 1's transaction on a worker that then stalls in the commit; the worker is killed and the workflows terminated. */
async function splitThenAbandon(commits: 'markers' | 'outputs', parallelism?: number) {
  const s = await prepareScenario(deps, {
    prefix: `split-log-${commits}${parallelism ? '-g' : ''}`,
    records: 600,
    partitions: 2,
    poisonEvery: 7,
    deadLetter: { maxRatio: 0.2 },
    ...(parallelism ? { parallelism } : {}),
  });
  const at = 'commit.before@epoch=1@partition=0@attempt=1';
  const doomed = spawnWorker(s.taskQueue, {
    ONCEFLOW_FAULTS: `${at}:split=${commits},${at}:stall=120000`,
    ONCEFLOW_WORKFLOW_BUNDLE: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '',
  });
  try {
    await start(deps, s);
    await faultFired(doomed, 'stall=120000', at, 90_000);
    assertFired(doomed.faultLines, faultLine(`split=${commits}`, at), 'the worker');
    const ids = parallelism
      ? [groupWorkflowId(s.spec.name, 0)]
      : [0, 1].map((p) => partitionWorkflowId(s.spec.name, p));
    for (const id of [pipelineWorkflowId(s.spec.name), ...ids])
      await deps.client.workflow
        .getHandle(id)
        .terminate('split.test.ts: operator gave up')
        .catch(() => undefined);
  } finally {
    doomed.kill('SIGKILL');
    await doomed.exited;
  }
  return s;
}

for (const [commits, parallelism] of [
  ['outputs', undefined],
  ['markers', 1],
] as const) {
  const mode = parallelism ? 'in a partition group' : 'ungrouped';
  test(
    `a split no history names (${commits} committed, ${mode}): onceflow transactions lists it, the restarted pipeline's reconcile repairs it — exactly once`,
    { timeout: 240_000 },
    async () => {
      const s = await splitThenAbandon(commits, parallelism);
      let out = '';
      assert.equal(
        await main(['transactions', s.spec.name], { stdout: (x) => void (out += x), stderr: (x) => void (out += x) }),
        0,
        out,
      );
      assert.match(
        out,
        /partition \d+ epoch \d+: Kafka split its transaction \(producer \d+ epoch \d+\): committed on .+, aborted on .+ → starting the pipeline writes it again where it aborted/,
      );
      const splits: KafkaSplit[] = [];
      const report = await runToEnd(deps, s, { observe: (e) => void (e.kind === 'split' && splits.push(e.split)) });
      assert.equal(report.totals.outputs + report.totals.deadLetters, 600);
      assert.ok(splits.length >= 1, 'reconcile reported the split it repaired');
      const committedMarkers = splits.every(
        (x) => x.committed.length > 0 && x.committed.every((p) => p.startsWith('onceflow.progress.')),
      );
      assert.equal(committedMarkers, commits === 'markers', `what committed: ${JSON.stringify(splits)}`);
    },
  );
}
