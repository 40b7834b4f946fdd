/** Test helpers around one pipeline run on the real services. */
import type { WorkflowHandle } from '@temporalio/client';
import { startPipeline, controlPipeline } from '../../src/client';
import {
  compareSpec,
  makeEvents,
  produceValues,
  resetPipeline,
  type InputSet,
} from '../../examples/flink-compare/scenario';
import type { PipelineInput, PipelineSpec } from '../../src/spec';
import type { CompareOptions } from '../../examples/flink-compare/transform';
import { verifyPipeline, type VerifyReport } from '../../src/verify';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import type { pipelineWorkflow } from '../../src/workflows/pipeline';
import { recoverXids, rollbackXid } from '../../src/mysql/branch';
import type { Xid } from '../../src/mysql/xid';
import assert from 'node:assert/strict';
import type { ObservedEvent } from '../../src/activities/observe';
import type { Faults } from '../../src/faults';
import { createOnceflowWorker } from '../../src/worker';
import { bundle, uniqueName, waitUntil, type Deps } from './env';

export interface Scenario {
  spec: PipelineSpec;
  taskQueue: string;
  input: InputSet;
  partitions: number;
}

/** Fresh topics and table, `records` input events produced, nothing started yet. */
export async function prepareScenario(
  deps: Deps,
  opts: {
    prefix: string;
    records: number;
    partitions: number;
    poisonEvery?: number;
    seed?: number;
    transactionTimeoutMs?: number;
    epochsPerRun?: number;
    epoch?: PipelineInput['epoch'];
    transformOptions?: CompareOptions;
    mysqlMode?: 'staged' | 'direct';
    parallelism?: number;
    /** The dead-letter budget; input with poison records denser than one per epoch needs one (the default allows 1% of an epoch, at least one record). */
    deadLetter?: PipelineInput['deadLetter'];
  },
): Promise<Scenario> {
  const name = uniqueName(opts.prefix);
  const base = compareSpec({
    name,
    source: { topic: `${name}.in` },
    kafkaSink: {
      topic: `${name}.out`,
      ...(opts.transactionTimeoutMs ? { transactionTimeoutMs: opts.transactionTimeoutMs } : {}),
    },
    epoch: { maxRecords: 100, maxWaitMs: 500, ...opts.epoch },
    ...(opts.epochsPerRun ? { epochsPerRun: opts.epochsPerRun } : {}),
    ...(opts.parallelism ? { parallelism: opts.parallelism } : {}),
    ...(opts.deadLetter ? { deadLetter: opts.deadLetter } : {}),
    transformOptions: { table: `t_${name.replace(/[^a-z0-9]/g, '_')}`, ...opts.transformOptions },
  });
  const spec = opts.mysqlMode ? { ...base, mysqlSink: { ...base.mysqlSink, mode: opts.mysqlMode } } : base;
  await resetPipeline(deps.admin, deps.pool, spec, opts.partitions);
  const { values, input } = makeEvents(opts.records, opts.seed ?? 7, opts.poisonEvery ?? 0);
  await produceValues(deps.settings.kafka, spec.source.topic, opts.partitions, values);
  return { spec, taskQueue: uniqueName('tq'), input, partitions: opts.partitions };
}

export async function start(deps: Deps, s: Scenario): Promise<WorkflowHandle<typeof pipelineWorkflow>> {
  return startPipeline(deps.client, s.spec, s.taskQueue);
}

export async function drainAndWait(deps: Deps, s: Scenario, handle: WorkflowHandle<typeof pipelineWorkflow>) {
  await controlPipeline(deps.client, s.spec.name, 'drain');
  return handle.result();
}

export async function verify(deps: Deps, s: Scenario): Promise<VerifyReport> {
  return verifyPipeline(
    { cluster: deps.cluster, admin: deps.admin, pool: deps.pool, transforms: compareTransforms() },
    s.spec,
  );
}

/**
 * Runs scenario `s` to its end on a worker in this process (the compare transforms, the test
 * bundle, `faults` and `observe` if given): start, drain, verify. Requires verify to pass and
 * returns its report.
 */
export async function runToEnd(
  deps: Deps,
  s: Scenario,
  opts: { faults?: Faults; observe?: (e: ObservedEvent) => void } = {},
): Promise<VerifyReport> {
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: compareTransforms(),
    worker: { workflowBundle: bundle() },
    ...opts,
  });
  const running = w.run();
  try {
    await drainAndWait(deps, s, await start(deps, s));
    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    return report;
  } finally {
    w.shutdown();
    await running;
  }
}

export function failedChecks(r: VerifyReport): string {
  return r.checks
    .filter((c) => !c.ok)
    .map((c) => `${c.name}: ${c.detail}`)
    .join('\n');
}

/**
 * Waits until a branch of `gtrid` is prepared and rolls it back from outside the pipeline (as an
 * operator's XA ROLLBACK or a MySQL that lost it would): the branch history decides. Returns its xid.
 */
export function rollBackWhenPrepared(deps: Deps, gtrid: string, what: string): Promise<Xid> {
  return waitUntil(
    what,
    async () => {
      const [x] = await recoverXids(deps.pool, gtrid);
      return x && x.gtrid === gtrid && (await rollbackXid(deps.pool, x)) === 'rolled-back' ? x : undefined;
    },
    30_000,
    50,
  );
}
