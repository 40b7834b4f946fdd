/**
 * Verify's readers: what a pipeline's run left in Kafka (output, dead-letter and progress topics,
 * LSO against high watermark) and in MySQL (ledger, prepared XA branches, staged epochs). They
 * only read; src/verify/checks.ts judges what they return.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Admin } from 'kafkajs';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { readRange } from '../activities/source';
import {
  earliestOffset,
  fetchPartition,
  ISOLATION,
  latestOffset,
  type KafkaCluster,
  type RawRecord,
} from '../kafka/internals';
import { lastCommittedMarker } from '../kafka/progress';
import { partitionCounts } from '../kafka/topics';
import { recoverXids } from '../mysql/branch';
import { lastLedgerRow } from '../mysql/ledger';
import { listSources } from '../mysql/sources';
import { pendingEpochs } from '../mysql/stage';
import { partitionGtridPrefix, pipelineGroupGtridPrefix, pipelineGtridPrefix } from '../mysql/xid';
import { sourceTopics, type PipelineSpec } from '../spec';
import type { SourceRecord } from '../transforms/registry';
import type { PipelineSourcePartition } from './types';

export async function readAll(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  isolation: 0 | 1,
): Promise<RawRecord[]> {
  const start = await earliestOffset(cluster, topic, partition);
  const end = await latestOffset(cluster, topic, partition, isolation);
  const out: RawRecord[] = [];
  let next = start;
  while (next < end) {
    const r = await fetchPartition(cluster, {
      topic,
      partition,
      fromOffset: next,
      maxBytes: 4 << 20,
      maxWaitMs: 100,
      isolation,
    });
    for (const rec of r.records) if (rec.offset < end) out.push(rec);
    if (r.nextOffset <= next) break;
    next = r.nextOffset;
  }
  return out;
}

/**
 * The source partitions of a pipeline, as `verify` and `status` see them: the ids assigned by
 * the pipeline's discovery (src/mysql/sources.ts) — every partition workflow it started, on
 * every topic, including partitions added later — or, for a pipeline that never recorded
 * assignments (started before them), the ids the first discovery would assign (for a single
 * topic: id = partition). `goneTopics` are source topics that no longer exist; `unassigned`
 * are partitions of existing source topics that no partition workflow reads (yet).
 */
export async function pipelineSources(
  deps: { admin: Admin; pool: Pool },
  spec: PipelineSpec,
): Promise<{
  sources: PipelineSourcePartition[];
  goneTopics: string[];
  unassigned: { topic: string; partition: number }[];
}> {
  const topics = sourceTopics(spec);
  const counts = await partitionCounts(deps.admin, topics);
  const present = topics.filter((t) => (counts.get(t) ?? 0) > 0);
  let sources: PipelineSourcePartition[] = (await listSources(deps.pool, spec.name)).map(
    ({ id, topic, partition }) => ({ id, topic, partition }),
  );
  if (sources.length === 0) {
    let id = 0;
    sources = present.flatMap((topic) =>
      Array.from({ length: counts.get(topic) ?? 0 }, (_, partition) => ({ id: id++, topic, partition })),
    );
  }
  const known = new Set(sources.map((s) => `${s.topic}\u0000${s.partition}`));
  const unassigned = present.flatMap((topic) =>
    Array.from({ length: counts.get(topic) ?? 0 }, (_, partition) => ({ topic, partition })).filter(
      (x) => !known.has(`${topic}\u0000${x.partition}`),
    ),
  );
  const goneTopics = [...new Set([...topics, ...sources.map((s) => s.topic)])].filter((t) => !(counts.get(t) ?? 0));
  return { sources, goneTopics, unassigned };
}

/** Partition counts of the pipeline's output, dead-letter and progress topics (0: no such topic). */
export interface SinkLayout {
  outputPartitions: number;
  deadLetterPartitions: number;
  progressPartitions: number;
}

export async function sinkLayout(admin: Admin, spec: PipelineSpec): Promise<SinkLayout> {
  const counts = await partitionCounts(admin, [spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic]);
  return {
    outputPartitions: counts.get(spec.kafkaSink.topic) ?? 0,
    deadLetterPartitions: counts.get(spec.deadLetterTopic) ?? 0,
    progressPartitions: counts.get(spec.progressTopic) ?? 0,
  };
}

/** The partitions whose LSO verify waits for and judges: every output and dead-letter partition, and the progress partitions of the pipeline's sources. */
export function transactionalPartitions(
  spec: PipelineSpec,
  layout: SinkLayout,
  all: PipelineSourcePartition[],
): [string, number][] {
  return [
    ...Array.from({ length: layout.outputPartitions }, (_, p): [string, number] => [spec.kafkaSink.topic, p]),
    ...Array.from({ length: layout.deadLetterPartitions }, (_, p): [string, number] => [spec.deadLetterTopic, p]),
    ...all.filter((s) => s.id < layout.progressPartitions).map((s): [string, number] => [spec.progressTopic, s.id]),
  ];
}

const SETTLE_MS = 10_000;

/**
 * EndTxn returns before the transaction markers are written: give the last commits a moment to
 * become visible (LSO = high watermark) before reading; what stays open is reported by hangingPartitions.
 */
export async function settleAll(cluster: KafkaCluster, partitions: [string, number][]): Promise<void> {
  for (const [t, p] of partitions) await settle(cluster, t, p, SETTLE_MS);
}

async function settle(cluster: KafkaCluster, topic: string, partition: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const hw = await latestOffset(cluster, topic, partition, ISOLATION.READ_UNCOMMITTED);
    if ((await latestOffset(cluster, topic, partition, ISOLATION.READ_COMMITTED)) >= hw) return;
    await sleep(100);
  }
}

/** What one source partition's run committed: its ledger and marker epochs, the source's end and the committed source records. */
export interface SourceRead {
  ledgerEpoch: number | null;
  markerEpoch: number | null;
  committedThrough: number | null;
  sourceEnd: number;
  records: SourceRecord[];
}

export async function readSource(
  deps: { cluster: KafkaCluster; pool: Pool },
  spec: PipelineSpec,
  src: PipelineSourcePartition,
  progressPartitions: number,
): Promise<SourceRead> {
  const { cluster, pool } = deps;
  const p = src.id;
  const ledger = await lastLedgerRow(pool, spec.name, p);
  const marker =
    p < progressPartitions
      ? await lastCommittedMarker(cluster, spec.progressTopic, p, await earliestOffset(cluster, spec.progressTopic, p))
      : null;
  const committedThrough = ledger?.end ?? null;
  const sourceEnd = await latestOffset(cluster, src.topic, src.partition, ISOLATION.READ_COMMITTED);
  // Everything the pipeline committed, transformed once, is what must be visible.
  const from = await firstEpochStart(pool, spec.name, p);
  const records =
    committedThrough === null || from === null
      ? []
      : await readRange(cluster, src.topic, src.partition, from, committedThrough, () => undefined);
  return {
    ledgerEpoch: ledger?.epoch ?? null,
    markerEpoch: marker?.epoch ?? null,
    committedThrough,
    sourceEnd,
    records,
  };
}

async function firstEpochStart(pool: Pool, pipeline: string, partition: number): Promise<number | null> {
  const [rows] = await pool.execute<RowDataPacket[]>(
    'SELECT start_offset FROM onceflow_ledger WHERE pipeline = ? AND source_partition = ? ORDER BY epoch ASC LIMIT 1',
    [pipeline, partition],
  );
  return rows[0] ? Number(rows[0].start_offset) : null;
}

/** One output partition: its read_committed records and its read_uncommitted count. A partition that does not exist holds nothing. */
export async function readOutput(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  exists: boolean,
): Promise<{ committed: RawRecord[]; uncommitted: number }> {
  if (!exists) return { committed: [], uncommitted: 0 };
  const committed = await readAll(cluster, topic, partition, ISOLATION.READ_COMMITTED);
  const uncommitted = (await readAll(cluster, topic, partition, ISOLATION.READ_UNCOMMITTED)).length;
  return { committed, uncommitted };
}

/** Every read_committed record of the dead-letter topic. */
export async function readDeadLetters(cluster: KafkaCluster, topic: string, partitions: number): Promise<RawRecord[]> {
  const out: RawRecord[] = [];
  for (let p = 0; p < partitions; p++) out.push(...(await readAll(cluster, topic, p, ISOLATION.READ_COMMITTED)));
  return out;
}

/** The partitions whose LSO lags their high watermark (a transaction holds them back), described. */
export async function hangingPartitions(cluster: KafkaCluster, partitions: [string, number][]): Promise<string[]> {
  const out: string[] = [];
  for (const [t, p] of partitions) {
    const hw = await latestOffset(cluster, t, p, ISOLATION.READ_UNCOMMITTED);
    const lso = await latestOffset(cluster, t, p, ISOLATION.READ_COMMITTED);
    if (lso !== hw) out.push(`${t}[${p}] LSO ${lso} < HW ${hw}`);
  }
  return out;
}

/** Unassigned source partitions that hold records (no partition workflow reads them). */
export async function unreadPartitions(
  cluster: KafkaCluster,
  unassigned: { topic: string; partition: number }[],
): Promise<string[]> {
  const unread: string[] = [];
  for (const u of unassigned) {
    if (
      (await latestOffset(cluster, u.topic, u.partition, ISOLATION.READ_COMMITTED)) >
      (await earliestOffset(cluster, u.topic, u.partition))
    )
      unread.push(`${u.topic}[${u.partition}]`);
  }
  return unread;
}

/** What the pipeline left in MySQL: its prepared XA branches and the epochs staged but not applied. */
export async function readMysqlLeftovers(pool: Pool, spec: PipelineSpec, all: PipelineSourcePartition[]) {
  const prefixes = all.map((s) => partitionGtridPrefix(spec.name, s.id));
  // The partitions' own branches, and those of the pipeline's partition groups (spec.parallelism).
  prefixes.push(pipelineGroupGtridPrefix(spec.name));
  const prepared = (await recoverXids(pool, pipelineGtridPrefix(spec.name))).filter((x) =>
    prefixes.some((pre) => x.gtrid.startsWith(pre)),
  );
  const unapplied = await pendingEpochs(pool, spec.name);
  return { prepared, unapplied };
}
