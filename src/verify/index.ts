/**
 * Exactly-once verification of a pipeline against the real services (docs/design.md, "How exactly-once is checked"):
 *  - the read_committed output equals the transform applied once to every committed source
 *    record (same records, no duplicates, none missing, source order per partition);
 *  - the dead-letter topic holds each rejected record once, and the run's dead letters are
 *    within the pipeline's dead-letter budget (counted per reason);
 *  - MySQL tables equal the row operations applied once (tables the pipeline owns alone);
 *  - no XA branch of the pipeline stays prepared;
 *  - no transaction holds back the LSO of an output, dead-letter or progress partition;
 *  - the ledger and the progress markers agree per partition;
 *  - the read_uncommitted view, whose extra copies show the aborted attempts a misconfigured
 *    consumer would see.
 * It assumes the output topics and tables hold only this pipeline's writes.
 *
 * This file drives the steps: src/verify/read.ts reads the services, src/verify/expected.ts
 * transforms the committed records once, src/verify/checks.ts judges; the report's shapes are in
 * src/verify/types.ts.
 */
import type { Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import type { KafkaCluster } from '../kafka/internals';
import type { PipelineSpec } from '../spec';
import type { Transform, TransformRegistry } from '../transforms/registry';
import { checksOf, compare, deadLetterSummary, fingerprint, judgeOutput, totalsOf, type Findings } from './checks';
import { Expected } from './expected';
import {
  hangingPartitions,
  pipelineSources,
  readDeadLetters,
  readMysqlLeftovers,
  readOutput,
  readSource,
  settleAll,
  sinkLayout,
  transactionalPartitions,
  unreadPartitions,
  type SinkLayout,
} from './read';
import type { OutputReport, PartitionReport, PipelineSourcePartition, VerifyReport } from './types';

export type {
  Check,
  DeadLetterSummary,
  OutputReport,
  PartitionReport,
  PipelineSourcePartition,
  VerifyReport,
} from './types';
export { readAll, pipelineSources } from './read';
export { budgetCheck, deadLetterSummary } from './checks';

type Deps = { cluster: KafkaCluster; admin: Admin; pool: Pool; transforms: TransformRegistry };

/**
 * Checks a pipeline's run end to end: every committed source record transformed once is in the
 * read_committed output (no duplicate, none missing, source order per partition), the MySQL
 * tables equal the rows applied once, nothing is left prepared or hanging, and the ledger and
 * progress markers agree. Needs the pipeline's transform (it maps the records again).
 * `onProgress` hears each source partition as it is done (verify reads every record).
 */
export async function verifyPipeline(
  deps: Deps,
  spec: PipelineSpec,
  onProgress?: (done: number, total: number, partition: string) => void,
): Promise<VerifyReport> {
  const { cluster, pool } = deps;
  const transform = deps.transforms.get(spec.transform, spec.name);
  const { sources: all, goneTopics, unassigned } = await pipelineSources(deps, spec);
  const sources = all.filter((s) => !goneTopics.includes(s.topic));
  const layout = await sinkLayout(deps.admin, spec);
  const topicParts = transactionalPartitions(spec, layout, all);
  await settleAll(cluster, topicParts);
  const { expected, reports, sourceRecords } = await expectSources(deps, spec, transform, sources, layout, onProgress);
  const outputs = await judgeOutputs(cluster, spec, expected, layout.outputPartitions, reports);
  const dlRecords = await readDeadLetters(cluster, spec.deadLetterTopic, layout.deadLetterPartitions);
  const deadLetterSources = dlRecords.map((r) => String(r.headers['onceflow.source'] ?? ''));
  for (const r of reports)
    r.deadLetters = deadLetterSources.filter((d) => d.startsWith(`${r.topic}/${r.topicPartition}/`)).length;
  const hangingWhere = await hangingPartitions(cluster, topicParts);
  const unread = await unreadPartitions(cluster, unassigned);
  const { prepared, unapplied } = await readMysqlLeftovers(pool, spec, all);
  const findings: Findings = {
    reports,
    outputs,
    outputPartitions: layout.outputPartitions,
    sourceRecords,
    deadLetterSources,
    deadLetterCmp: compare(expected.deadLetters.sort(), deadLetterSources.slice().sort()),
    deadLetters: deadLetterSummary(spec, dlRecords, sourceRecords),
    goneTopics,
    unread,
    hangingWhere,
    prepared,
    unapplied,
    tableProblems: await expected.rows.compare(pool, spec.mysqlSink.tables),
    expectedRows: expected.rows.size,
  };
  const totals = totalsOf(findings);
  const checks = checksOf(spec, findings, totals);
  return {
    pipeline: spec.name,
    ok: checks.every((c) => c.ok),
    checks,
    deadLetters: findings.deadLetters,
    partitions: reports,
    outputs,
    totals,
  };
}

/** Reads each source partition's committed records and transforms them once: what must be visible. */
async function expectSources(
  deps: Deps,
  spec: PipelineSpec,
  transform: Transform,
  sources: PipelineSourcePartition[],
  layout: SinkLayout,
  onProgress?: (done: number, total: number, partition: string) => void,
) {
  // The default output partition is id mod the partition count (src/activities/apply.ts); for
  // pipelines started before, that is the source partition whenever their setup check passed.
  const both =
    layout.outputPartitions > 0 && layout.deadLetterPartitions > 0
      ? { outputPartitions: layout.outputPartitions, deadLetterPartitions: layout.deadLetterPartitions }
      : undefined;
  const expected = new Expected(spec, transform, both);
  const reports: PartitionReport[] = [];
  let sourceRecords = 0;
  for (const src of sources) {
    const read = await readSource(deps, spec, src, layout.progressPartitions);
    sourceRecords += read.records.length;
    reports.push(await expected.add(src, read));
    onProgress?.(reports.length, sources.length, `${src.topic}[${src.partition}]`);
  }
  return { expected, reports, sourceRecords };
}

/** Per output partition (those that exist and those outputs are expected in): expected vs read_committed. */
async function judgeOutputs(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  expected: Expected,
  outputPartitions: number,
  reports: PartitionReport[],
): Promise<OutputReport[]> {
  const reportOf = new Map(reports.map((r) => [r.partition, r]));
  const outputs: OutputReport[] = [];
  const outParts = [
    ...new Set([...Array.from({ length: outputPartitions }, (_, o) => o), ...expected.outputs.keys()]),
  ].sort((a, b) => a - b);
  for (const o of outParts) {
    // An output partition that does not exist holds nothing: what should be there is missing.
    const found = await readOutput(cluster, spec.kafkaSink.topic, o, o >= 0 && o < outputPartitions);
    const committed = found.committed.map((r) => fingerprint(r.key, r.value));
    outputs.push(
      judgeOutput(o, expected.outputs.get(o) ?? new Map<number, string[]>(), committed, found.uncommitted, reportOf),
    );
  }
  return outputs;
}
