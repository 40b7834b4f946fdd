/**
 * Split transactions that no workflow history names, found from the log itself: a restarted
 * pipeline's reconcile and `onceflow transactions` have only the progress topic to start from.
 * Where such a transaction wrote is read from the output and dead-letter topics (writtenInLog),
 * and its outcome judged there by the one judge of a transaction's outcome (judgeTransaction,
 * ./outcome.ts).
 */
import type { KafkaSplit, WrittenParts } from '../protocol';
import type { PipelineSpec } from '../spec';
import { mapLimit } from '../limit';
import {
  ISOLATION,
  latestOffset,
  offsetForTime,
  partitionCount,
  producerPages,
  type KafkaCluster,
  type TxnHandle,
} from './internals';
import { judgeTransaction } from './outcome';
import { decodeMarker, type Marker } from './progress';

/** Clock difference allowed between a transaction's record timestamps and its marker's (producer and broker clocks). */
const CLOCK_SKEW_MS = 60_000;
/** Partitions scanned at once when a transaction's parts are looked for in the log. */
const SCAN_LANES = 8;

/** A progress marker record in the log, committed or not, with the transaction that wrote it. */
interface LoggedMarker {
  marker: Marker;
  offset: number;
  timestamp: number;
  producer: Pick<TxnHandle, 'producerId' | 'producerEpoch'>;
}

/** The progress marker records of `partition` at or after `from` (read_uncommitted: aborted ones too), in log order. */
async function markerRecords(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  from: number,
): Promise<LoggedMarker[]> {
  const out: LoggedMarker[] = [];
  for await (const f of producerPages(cluster, {
    topic: spec.progressTopic,
    partition,
    fromOffset: from,
    values: true,
  })) {
    for (const r of f.records) {
      const marker = decodeMarker(r.value ?? null);
      if (marker && marker.pipeline === spec.name && marker.partition === partition) {
        out.push({
          marker,
          offset: r.offset,
          timestamp: r.timestamp,
          producer: { producerId: Number(r.producerId), producerEpoch: r.producerEpoch },
        });
      }
    }
  }
  return out;
}

/**
 * Where the transaction that wrote `m` wrote outputs and dead letters, from the log alone: on
 * every partition of those topics, the first record of its producer id and epoch (an epoch names
 * one transaction: every prepare begins with InitProducerId) between the transaction timeout
 * before the marker and the marker (each widened by CLOCK_SKEW_MS).
 */
async function writtenInLog(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  m: LoggedMarker,
  onWait?: () => void,
): Promise<WrittenParts> {
  const from = m.timestamp - spec.kafkaSink.transactionTimeoutMs - CLOCK_SKEW_MS;
  const to = m.timestamp + CLOCK_SKEW_MS;
  const pid = String(m.producer.producerId);
  const written: WrittenParts = {};
  for (const topic of [spec.kafkaSink.topic, spec.deadLetterTopic]) {
    const partitions = Array.from({ length: await partitionCount(cluster, topic) }, (_, i) => i);
    const first = await mapLimit(partitions, SCAN_LANES, async (partition) => {
      for await (const f of producerPages(cluster, {
        topic,
        partition,
        fromOffset: await offsetForTime(cluster, topic, partition, from),
      })) {
        for (const r of f.records) {
          if (r.producerId === pid && r.producerEpoch === m.producer.producerEpoch) return r.offset;
          if (r.timestamp > to) return null;
        }
        onWait?.();
      }
      return null;
    });
    const found = partitions.flatMap((p, i) => (first[i] === null ? [] : [[p, first[i]!] as [number, number]]));
    if (found.length) written[topic] = found;
  }
  return written;
}

/** A split transaction found in the log: the epoch its marker names, and the transaction (with where it wrote) for the redo. */
export interface LoggedSplit {
  marker: Marker;
  markerOffset: number;
  original: Pick<TxnHandle, 'producerId' | 'producerEpoch'> & { written: WrittenParts };
  split: KafkaSplit;
}

/**
 * The split transactions of a partition that no history names: the transaction of its last
 * committed progress marker (`last`; its outputs may have aborted) and every later attempt at the
 * next epoch (its marker aborted; its outputs may have committed), each judged on every part it
 * wrote (judgeTransaction over writtenInLog). Transactions still open are left out; reconcile
 * calls it once the partition's Kafka side is settled, and repairs a split before it trusts the
 * marker.
 */
export async function splitsInLog(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  last: { offset: number; epoch: number } | null,
  logStart: number,
  onWait?: () => void,
): Promise<LoggedSplit[]> {
  const next = last ? last.epoch + 1 : 0;
  // A marker at or past the LSO belongs to a transaction still open: nothing to judge yet (a
  // pipeline that is stopped, not settled: `onceflow transactions` lists it as held back).
  const lso = await latestOffset(cluster, spec.progressTopic, partition, ISOLATION.READ_COMMITTED);
  const candidates = (await markerRecords(cluster, spec, partition, last?.offset ?? logStart)).filter(
    (m) =>
      m.offset < lso &&
      ((last && m.offset === last.offset) || (m.offset > (last?.offset ?? -1) && m.marker.epoch === next)),
  );
  const out: LoggedSplit[] = [];
  for (const m of candidates) {
    const written = await writtenInLog(cluster, spec, m, onWait);
    if (!Object.keys(written).length) continue;
    const verdict = await judgeTransaction(
      cluster,
      spec,
      { handle: { ...m.producer, written }, markers: [{ partition, offset: m.offset }] },
      onWait,
    );
    if (verdict.split)
      out.push({
        marker: m.marker,
        markerOffset: m.offset,
        original: { ...m.producer, written },
        split: verdict.split,
      });
  }
  return out;
}
