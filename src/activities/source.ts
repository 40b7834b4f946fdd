/**
 * Reading the source: an epoch's records (bounded by the epoch limits, closing once caught up)
 * and an exact offset range again for a redo. Always read_committed.
 */
import type { Admin } from 'kafkajs';
import { SourceGone, SourceTopicGone } from '../errors';
import type { SourceRef } from '../protocol';
import type { PipelineSpec } from '../spec';
import type { OutputLayout } from './apply';
import { fetchPartition, fetchPartitions, ISOLATION, type FetchResult, type KafkaCluster, type RawRecord } from '../kafka/internals';
import type { EpochBounds } from '../spec';
import type { SourceRecord } from '../transforms/registry';

const FETCH_BYTES = 1 << 20;
const POLL_SLICE_MS = 1000;

function toSource(topic: string, partition: number, r: RawRecord): SourceRecord {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) {
    if (v === undefined) continue;
    const one = Array.isArray(v) ? v[v.length - 1] : v;
    if (one !== undefined) headers[k] = Buffer.isBuffer(one) ? one.toString('utf8') : String(one);
  }
  return { topic, partition, offset: r.offset, key: r.key, value: r.value, headers, timestamp: r.timestamp };
}

const size = (r: RawRecord) => (r.key?.length ?? 0) + (r.value?.length ?? 0);

function checkRetained(topic: string, partition: number, from: number, logStart: number): void {
  if (logStart > from) {
    throw new SourceGone(`source ${topic}[${partition}] no longer holds offset ${from} (log starts at ${logStart}); raise the topic's retention or restart the pipeline from a newer offset`, {
      topic,
      partition,
      from,
      logStart,
    });
  }
}

/** One partition's part of an epoch read. `end` is where its next epoch starts (past filtered aborted/control records too). */
export interface EpochRead {
  records: SourceRecord[];
  end: number;
  /** The partition's LSO as last seen (lag = sourceEnd − end). */
  sourceEnd: number;
}

/**
 * Records of the next epoch from `from`: waits up to `waitMs` for the first record, then takes
 * what is available up to the bounds, closing the epoch once caught up with the LSO.
 */
export async function readEpoch(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  from: number,
  bounds: EpochBounds,
  waitMs: number,
  onProgress: () => void,
): Promise<EpochRead> {
  return (await readGroup(cluster, [{ topic, partition, from }], bounds, waitMs, onProgress))[0]!;
}

/**
 * Long-polling fetches of this process in flight. A broker answers one connection's requests in
 * order, and each worker reads over one connection per broker: with many partitions idle, a
 * poll of up to POLL_SLICE_MS each would queue for longer than kafkajs's request timeout
 * (measured: 64 idle partitions at 1 s each stalled every read). So the polls in flight share
 * LONG_POLL_BUDGET_MS between them.
 */
let longPolls = 0;
const LONG_POLL_BUDGET_MS = 5_000;

/**
 * The next epoch of a group of partitions (one partition: readEpoch), read together: each round
 * is one Fetch per leader for all of them (fetchPartitions), which the broker answers as soon as
 * any has data. The bounds apply per partition. The epoch closes once it has records and every
 * partition is caught up with its LSO (or full); empty, after waitMs.
 */
export async function readGroup(
  cluster: KafkaCluster,
  parts: { topic: string; partition: number; from: number }[],
  bounds: EpochBounds,
  waitMs: number,
  onProgress: () => void,
): Promise<EpochRead[]> {
  const started = Date.now();
  const deadline = started + waitMs;
  const state = parts.map((p) => ({ ...p, read: { records: [] as SourceRecord[], end: p.from, sourceEnd: p.from } as EpochRead, bytes: 0, caughtUp: false, full: false }));
  const take = (m: (typeof state)[number], r: FetchResult) => {
    checkRetained(m.topic, m.partition, m.read.end, r.logStartOffset);
    m.read.sourceEnd = Math.max(m.read.sourceEnd, r.lastStableOffset);
    for (const raw of r.records) {
      if (m.read.records.length >= bounds.maxRecords || (m.read.records.length > 0 && m.bytes + size(raw) > bounds.maxBytes)) {
        m.read.end = raw.offset;
        m.full = true;
        return;
      }
      m.read.records.push(toSource(m.topic, m.partition, raw));
      m.bytes += size(raw);
    }
    m.read.end = Math.max(m.read.end, r.nextOffset);
    m.caughtUp = m.read.end >= r.lastStableOffset;
    if (m.read.records.length >= bounds.maxRecords) m.full = true;
  };
  for (let round = 0; ; round++) {
    const n = state.reduce((k, m) => k + m.read.records.length, 0);
    const active = state.filter((m) => !m.full);
    // Until every partition has answered once, nobody knows where data is (a partition alone may wait from the start).
    const idle = round === 0 ? state.length === 1 : active.every((m) => m.caughtUp);
    if (n > 0 && (active.length === 0 || idle)) break;
    if (n === 0 && round > 0 && Date.now() >= deadline) break;
    const wait = idle ? Math.max(0, Math.min(POLL_SLICE_MS, deadline - Date.now(), Math.floor(LONG_POLL_BUDGET_MS / (longPolls + 1)))) : 0;
    if (wait > 0) longPolls++;
    let rs: FetchResult[];
    try {
      rs = await fetchPartitions(
        cluster,
        active.map((m) => ({ topic: m.topic, partition: m.partition, fromOffset: m.read.end })),
        { maxBytes: FETCH_BYTES, maxWaitMs: wait, isolation: ISOLATION.READ_COMMITTED },
      );
    } finally {
      if (wait > 0) longPolls--;
    }
    onProgress();
    active.forEach((m, k) => take(m, rs[k]!));
  }
  return state.map((m) => m.read);
}

/** Exactly the visible records of [start, end), for a redo. */
export async function readRange(cluster: KafkaCluster, topic: string, partition: number, start: number, end: number, onProgress: () => void): Promise<SourceRecord[]> {
  const out: SourceRecord[] = [];
  let next = start;
  while (next < end) {
    const r = await fetchPartition(cluster, { topic, partition, fromOffset: next, maxBytes: FETCH_BYTES, maxWaitMs: 500, isolation: ISOLATION.READ_COMMITTED });
    onProgress();
    checkRetained(topic, partition, next, r.logStartOffset);
    for (const raw of r.records) if (raw.offset < end) out.push(toSource(topic, partition, raw));
    if (r.nextOffset <= next && r.lastStableOffset < end) {
      // The range lies beyond what is readable now (should not happen: it was read before).
      throw new Error(`source ${topic}[${partition}] cannot be read up to ${end} (LSO ${r.lastStableOffset})`);
    }
    next = Math.max(next, r.nextOffset);
  }
  return out;
}

/** Where an activity reads (topic, partition) and how it partitions outputs, for the source partition id `partition`. */
export interface Src {
  id: number;
  topic: string;
  partition: number;
  /** Absent for runs started before SourceRef: outputs go to the record's partition. */
  layout?: OutputLayout;
}

export function sourceOf(a: { spec: PipelineSpec; partition: number; source?: SourceRef }): Src {
  if (!a.source) return { id: a.partition, topic: a.spec.source.topic, partition: a.partition };
  const { topic, partition, outputPartitions, deadLetterPartitions } = a.source;
  return { id: a.partition, topic, partition, layout: { outputPartitions, deadLetterPartitions } };
}

/**
 * Runs a read of the source; if it fails and the topic no longer exists, fails with
 * SourceTopicGone (not retryable: retrying cannot bring a deleted topic back).
 */
export async function readingSource<T>(admin: Admin, spec: PipelineSpec, src: Src, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    const topics = await admin.listTopics().catch(() => null);
    if (topics && !topics.includes(src.topic)) throw new SourceTopicGone(src.topic, src.partition, spec.name);
    throw e;
  }
}
