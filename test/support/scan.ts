/**
 * Scanning a partition's log for the records one producer id and epoch wrote: the tests' witness,
 * independent of the broker's producer state that src/kafka/landed.ts asks for, of what a
 * transaction really put in the log. The fetches (kafkajs internals) are fetchProducerRecords in
 * src/kafka/internals; this module only walks the log and counts.
 */
import { fetchProducerRecords, type KafkaCluster } from '../../src/kafka/internals';

export interface ProducerRecordScan {
  /** Records of (producerId, producerEpoch) from `fromOffset` up to the high watermark. */
  found: number;
  /** Distinct sequence numbers among them, and the lowest and highest (-1 when none). */
  distinctSequences: number;
  minSequence: number;
  maxSequence: number;
  highWatermark: number;
  /** Fetch requests it took (the per-epoch cost of the check). */
  fetches: number;
}

/**
 * Counts EVERY data record one producer id and epoch wrote to a partition from `fromOffset` up
 * to the high watermark (read_uncommitted, so an open transaction's records count), with their
 * sequence numbers: a surplus shows, not only a shortfall. A short count (fewer than `expected`)
 * is looked at again until `settleMs` passed (a new leader's high watermark may lag the
 * acknowledged records for a moment); a surplus is final at once.
 */
export async function scanProducerRecords(
  cluster: KafkaCluster,
  args: {
    topic: string;
    partition: number;
    fromOffset: number;
    producerId: number;
    producerEpoch: number;
    expected: number;
    maxBytes?: number;
    settleMs?: number;
  },
): Promise<ProducerRecordScan> {
  const deadline = Date.now() + (args.settleMs ?? 3000);
  const maxBytes = args.maxBytes ?? 4 * 1024 * 1024;
  let fetches = 0;
  for (;;) {
    let found = 0;
    const sequences = new Set<number>();
    let offset = args.fromOffset;
    let hw = -1;
    for (;;) {
      fetches++;
      const f = await fetchProducerRecords(cluster, {
        topic: args.topic,
        partition: args.partition,
        fromOffset: offset,
        maxBytes,
      });
      hw = f.highWatermark;
      for (const r of f.records) {
        if (r.producerId !== String(args.producerId) || r.producerEpoch !== args.producerEpoch) continue;
        found++;
        sequences.add(r.sequence);
      }
      if (f.nextOffset >= hw || f.nextOffset === offset) break;
      offset = f.nextOffset;
    }
    const seq = [...sequences];
    const scan = {
      found,
      distinctSequences: seq.length,
      minSequence: seq.length ? Math.min(...seq) : -1,
      maxSequence: seq.length ? Math.max(...seq) : -1,
      highWatermark: hw,
      fetches,
    };
    if (found >= args.expected || Date.now() >= deadline) return scan;
    await new Promise((r) => setTimeout(r, 200));
  }
}
