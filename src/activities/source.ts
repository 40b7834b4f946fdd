/**
 * Reading the source: an epoch's records (bounded by the epoch limits, closing once caught up)
 * and an exact offset range again for a redo. Always read_committed.
 */
import type { Admin } from 'kafkajs';
import { SourceGone, SourceTopicGone } from '../errors';
import type { SourceRef } from '../protocol';
import type { PipelineSpec } from '../spec';
import { applyTransform, tableMap, type Applied, type OutputLayout } from './apply';
import type { ActivityContext } from './context';
import {
  fetchPartition,
  fetchPartitions,
  ISOLATION,
  type FetchResult,
  type KafkaCluster,
  type RawRecord,
} from '../kafka/internals';
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
    throw new SourceGone(
      `source ${topic}[${partition}] no longer holds offset ${from} (log starts at ${logStart}); raise the topic's retention or restart the pipeline from a newer offset`,
      {
        topic,
        partition,
        from,
        logStart,
      },
    );
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
 * Long-polling fetches of this process in flight. A broker answers one connection's requests in
 * order, and each worker reads over one connection per broker: with many partitions idle, a
 * poll of up to POLL_SLICE_MS each would queue for longer than kafkajs's request timeout
 * (measured: 64 idle partitions at 1 s each stalled every read). So the polls in flight share
 * LONG_POLL_BUDGET_MS between them.
 */
let longPolls = 0;
const LONG_POLL_BUDGET_MS = 5_000;

/**
 * The next epoch of a group of partitions (a group of one: a partition's), read together: each round
 * is one Fetch per leader for all of them (fetchPartitions), which the broker answers as soon as
 * any has data. The bounds are the epoch's, whatever the number of partitions: in each round the
 * partitions that have data (returned or not: the broker leaves out a partition whose next
 * batch does not fit its share of the Fetch) share what is left of them equally (one with less
 * leaves the rest to the next round), so no partition's backlog crowds out the others' and a
 * group epoch holds no more than an ungrouped one. The epoch closes once it has records and is
 * full or every partition is caught up with its LSO; empty, after waitMs.
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
  const state: Member[] = parts.map((p) => ({
    ...p,
    read: { records: [], end: p.from, sourceEnd: p.from },
    caughtUp: false,
  }));
  const total = { records: 0, bytes: 0 };
  let full = false;
  for (let round = 0; ; round++) {
    // Until every partition has answered once, nobody knows where data is (a partition alone may wait from the start).
    const idle = round === 0 ? state.length === 1 : state.every((m) => m.caughtUp);
    if (total.records > 0 && (full || idle)) break;
    if (total.records === 0 && round > 0 && Date.now() >= deadline) break;
    const wait = idle
      ? Math.max(0, Math.min(POLL_SLICE_MS, deadline - Date.now(), Math.floor(LONG_POLL_BUDGET_MS / (longPolls + 1))))
      : 0;
    if (wait > 0) longPolls++;
    let rs: FetchResult[];
    try {
      rs = await fetchPartitions(
        cluster,
        state.map((m) => ({ topic: m.topic, partition: m.partition, fromOffset: m.read.end })),
        { maxBytes: fetchBytes(bounds, total, state), maxWaitMs: wait, isolation: ISOLATION.READ_COMMITTED },
      );
    } finally {
      if (wait > 0) longPolls--;
    }
    onProgress();
    full = takeShares(state, rs, bounds, total);
  }
  if (total.records) recordBytesOf.set(topicsOf(state), total.bytes / total.records);
  return state.map((m) => m.read);
}

export interface Member {
  topic: string;
  partition: number;
  read: EpochRead;
  caughtUp: boolean;
}

/** Record size assumed for a topic this process has not read yet (only sizes a first fetch). */
const ASSUMED_RECORD_BYTES = 1024;
/**
 * The mean record size (key + value) of the last epoch this process read from a set of source
 * topics: sizes the next epoch's first fetch. Only a hint — a wrong one costs a fetch round
 * more, or bytes fetched and dropped, never a record.
 */
const recordBytesOf = new Map<string, number>();
const topicsOf = (state: Member[]) => [...new Set(state.map((m) => m.topic))].join(',');

/**
 * Bytes to ask per partition: about a partition's share of what is left of the epoch, so a
 * group of many partitions does not fetch (and decode) far more than it may take — at 32
 * partitions, 20,000-record epochs and 200-byte records, a first fetch sized for 1 KiB records
 * decoded about 5 times the records the epoch could take. At least 16 KiB; at most FETCH_BYTES.
 * (The broker returns a first batch larger than this whole.)
 */
function fetchBytes(bounds: EpochBounds, total: { records: number; bytes: number }, state: Member[]): number {
  const partitions = state.length;
  const recordBytes = total.records
    ? total.bytes / total.records
    : (recordBytesOf.get(topicsOf(state)) ?? ASSUMED_RECORD_BYTES);
  const share = Math.min((bounds.maxRecords - total.records) * recordBytes, bounds.maxBytes - total.bytes) / partitions;
  return Math.max(16 * 1024, Math.min(FETCH_BYTES, Math.ceil(share * 1.25)));
}

/**
 * Takes one round's fetched records within the epoch's bounds: each partition with data up to
 * an equal share of what is left (always its first record while the epoch has room for it, and
 * the epoch's first record whatever its size). A partition cut short is not caught up, and is
 * fetched again from where it stopped. Returns whether the epoch is full: at its bounds, or no
 * partition could take its next record. (Exported for its unit test.)
 */
export function takeShares(
  state: Member[],
  rs: FetchResult[],
  bounds: EpochBounds,
  total: { records: number; bytes: number },
): boolean {
  // A partition the broker returned nothing for although it has records (its batch did not fit
  // this round) still has a share: the first in line must not fill the epoch alone.
  const withData = Math.max(
    1,
    rs.filter((r, k) => r.records.length > 0 || r.lastStableOffset > state[k]!.read.end).length,
  );
  const share = Math.max(1, Math.ceil((bounds.maxRecords - total.records) / withData));
  const byteShare = Math.floor((bounds.maxBytes - total.bytes) / withData);
  const before = total.records;
  let cut = 0;
  state.forEach((m, k) => {
    const r = rs[k]!;
    checkRetained(m.topic, m.partition, m.read.end, r.logStartOffset);
    m.read.sourceEnd = Math.max(m.read.sourceEnd, r.lastStableOffset);
    let n = 0;
    let bytes = 0;
    for (const raw of r.records) {
      const s = size(raw);
      const room =
        total.records < bounds.maxRecords &&
        total.bytes + s <= bounds.maxBytes &&
        (n === 0 || (n < share && bytes + s <= byteShare));
      if (!room && total.records > 0) {
        m.read.end = raw.offset;
        m.caughtUp = false;
        cut++;
        return;
      }
      m.read.records.push(toSource(m.topic, m.partition, raw));
      n++;
      bytes += s;
      total.records++;
      total.bytes += s;
    }
    m.read.end = Math.max(m.read.end, r.nextOffset);
    m.caughtUp = m.read.end >= r.lastStableOffset;
  });
  return total.records >= bounds.maxRecords || total.bytes >= bounds.maxBytes || (cut > 0 && total.records === before);
}

/** Exactly the visible records of [start, end), for a redo. */
export async function readRange(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  start: number,
  end: number,
  onProgress: () => void,
): Promise<SourceRecord[]> {
  const out: SourceRecord[] = [];
  let next = start;
  while (next < end) {
    const r = await fetchPartition(cluster, {
      topic,
      partition,
      fromOffset: next,
      maxBytes: FETCH_BYTES,
      maxWaitMs: 500,
      isolation: ISOLATION.READ_COMMITTED,
    });
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

/**
 * A decided epoch's records read again and transformed again, for a redo of either side (the
 * transform is deterministic: the same records give the same outputs, dead letters and rows).
 */
export async function reapply(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  e: { epoch: number; start: number; end: number },
  src: Src,
): Promise<{ records: SourceRecord[]; applied: Applied }> {
  const records = await readingSource(ctx.admin, spec, src, () =>
    readRange(ctx.cluster, src.topic, src.partition, e.start, e.end, ctx.heartbeat),
  );
  const applied = await applyTransform(
    spec,
    ctx.transforms.get(spec.transform, spec.name),
    records,
    ctx.transformCtx(spec, partition, e.epoch),
    tableMap(spec),
    src.layout,
  );
  return { records, applied };
}
