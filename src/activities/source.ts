/**
 * Reading the source: an epoch's records (bounded by the epoch limits, closing once caught up)
 * and an exact offset range again for a redo. Always read_committed.
 */
import type { Admin } from 'kafkajs';
import { SourceGone, SourceTopicGone } from '../errors';
import type { SourceRef } from '../protocol';
import type { PipelineSpec } from '../spec';
import type { OutputLayout } from './apply';
import { fetchPartition, ISOLATION, type KafkaCluster, type RawRecord } from '../kafka/internals';
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

/**
 * Records of the next epoch from `from`: waits up to `waitMs` for the first record, then takes
 * what is available up to the bounds, closing the epoch once caught up with the LSO.
 * `end` is where the next epoch starts (past filtered aborted/control records too).
 */
export async function readEpoch(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  from: number,
  bounds: EpochBounds,
  waitMs: number,
  onProgress: () => void,
): Promise<{ records: SourceRecord[]; end: number; sourceEnd: number }> {
  const started = Date.now();
  const deadline = started + waitMs;
  // A caught-up epoch with records closes at lingerUntil (= at once without lingerMs).
  const lingerUntil = started + Math.min(bounds.lingerMs ?? 0, waitMs);
  const records: SourceRecord[] = [];
  let bytes = 0;
  let next = from;
  let sourceEnd = from;
  for (;;) {
    const wait = Math.max(0, Math.min(POLL_SLICE_MS, (records.length > 0 ? lingerUntil : deadline) - Date.now()));
    const r = await fetchPartition(cluster, { topic, partition, fromOffset: next, maxBytes: FETCH_BYTES, maxWaitMs: wait, isolation: ISOLATION.READ_COMMITTED });
    onProgress();
    checkRetained(topic, partition, next, r.logStartOffset);
    sourceEnd = Math.max(sourceEnd, r.lastStableOffset);
    for (const raw of r.records) {
      if (records.length >= bounds.maxRecords || (records.length > 0 && bytes + size(raw) > bounds.maxBytes)) {
        return { records, end: raw.offset, sourceEnd };
      }
      records.push(toSource(topic, partition, raw));
      bytes += size(raw);
    }
    const advanced = r.nextOffset > next;
    next = Math.max(next, r.nextOffset);
    const caughtUp = next >= r.lastStableOffset;
    if (records.length > 0 && ((caughtUp && Date.now() >= lingerUntil) || records.length >= bounds.maxRecords)) return { records, end: next, sourceEnd };
    if (!advanced && Date.now() >= deadline) return { records, end: next, sourceEnd };
  }
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
