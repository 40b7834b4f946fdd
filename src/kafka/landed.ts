/**
 * What an epoch's Kafka transaction really wrote, checked before the epoch may be committed.
 *
 * kafkajs 2.2.4 can acknowledge a produce whose records never reached the log
 * (producer/sendMessages.js): one send builds a request per leader broker and keeps each broker's
 * response across its retries, keyed by broker. When one broker's request fails (its node died)
 * and the retry's fresh metadata moves that partition to a broker that has already answered, the
 * retry sends that broker nothing and the send resolves with the earlier responses only — the
 * moved partition's records are dropped, and their sequence numbers were rolled back on the
 * failure, so the next batch to the partition is accepted without a gap. A transaction holding
 * such a send would commit without those records (docs/reliability.md, cluster campaign).
 *
 * Two checks close it:
 *  - every send: each topic-partition a send carried records for must be in its acknowledgement
 *    (free; this is the kafkajs path above);
 *  - once, after the epoch's sends: per topic-partition, the log read read_uncommitted from the
 *    first offset this transaction was acknowledged at must hold as many records of this
 *    producer id and epoch as were sent (one fetch per partition, typically). Whatever makes an
 *    acknowledged record go missing, the epoch is not committed with fewer.
 * Either failure is a TransientError: prepare aborts the transaction and the attempt is retried
 * from the source offsets, with a new producer epoch.
 */
import { TransientError } from '../errors';
import { countProducerRecords, PreparedTransaction, type KafkaCluster, type ProducedOffsets, type TxnHandle } from './internals';

type Message = { key?: Buffer | string | null; value: Buffer | string | null; partition?: number; headers?: Record<string, string | Buffer> };

/** Per topic-partition: records sent, and the first offset the broker acknowledged for them. */
export interface SentPartition {
  topic: string;
  partition: number;
  sent: number;
  firstOffset?: number;
}

export interface LandedCheck {
  partitions: number;
  fetches: number;
  ms: number;
}

export class CountedTransaction extends PreparedTransaction {
  readonly sent = new Map<string, SentPartition>();
  /** Records sent without an explicit partition (not counted per partition). */
  unpartitioned = 0;

  override async send(topicMessages: { topic: string; messages: Message[] }[]): Promise<ProducedOffsets[]> {
    const res = await super.send(topicMessages);
    const acked = new Map(res.map((r) => [`${r.topic}/${r.partition}`, r.baseOffset]));
    const missing: string[] = [];
    for (const { topic, messages } of topicMessages) {
      const perPartition = new Map<number, number>();
      for (const m of messages) {
        if (m.partition === undefined || m.partition === null) this.unpartitioned++;
        else perPartition.set(m.partition, (perPartition.get(m.partition) ?? 0) + 1);
      }
      for (const [partition, n] of perPartition) {
        const k = `${topic}/${partition}`;
        const entry = this.sent.get(k) ?? { topic, partition, sent: 0 };
        entry.sent += n;
        const base = acked.get(k);
        if (base === undefined) missing.push(`${k} (${n} records)`);
        else if (entry.firstOffset === undefined || base < entry.firstOffset) entry.firstOffset = base;
        this.sent.set(k, entry);
      }
    }
    if (missing.length) {
      throw new TransientError(`Kafka acknowledged a send without ${missing.join(', ')} (kafkajs dropped a partition whose leader moved during the send); the attempt is redone`, { missing });
    }
    return res;
  }
}

/**
 * Counts, per topic-partition the transaction wrote, its producer's records in the log from
 * the first acknowledged offset; throws a TransientError on any shortfall.
 */
export async function checkLanded(cluster: KafkaCluster, txn: CountedTransaction, handle: TxnHandle, skipTopics: string[] = []): Promise<LandedCheck> {
  const t0 = Date.now();
  let fetches = 0;
  let partitions = 0;
  const short: string[] = [];
  for (const p of txn.sent.values()) {
    if (skipTopics.includes(p.topic)) continue;
    partitions++;
    if (p.firstOffset === undefined) {
      short.push(`${p.topic}[${p.partition}]: ${p.sent} sent, none acknowledged`);
      continue;
    }
    const c = await countProducerRecords(cluster, { topic: p.topic, partition: p.partition, fromOffset: p.firstOffset, producerId: handle.producerId, producerEpoch: handle.producerEpoch, expected: p.sent });
    fetches += c.fetches;
    if (c.found < p.sent) short.push(`${p.topic}[${p.partition}]: ${p.sent} sent and acknowledged, ${c.found} in the log from offset ${p.firstOffset} (high watermark ${c.highWatermark})`);
  }
  if (short.length) throw new TransientError(`acknowledged records missing from the log before commit: ${short.join('; ')}; the attempt is redone`, { short });
  return { partitions, fetches, ms: Date.now() - t0 };
}
