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
 * The same code can also write a send's records TWICE in one transaction (the cluster campaign's
 * run of seed 20261202, docs/reliability.md): sendMessages keys its per-broker requests by Broker
 * object, but builds each request from every partition that broker's NODE leads; when the
 * client's broker pool holds a node under a new object (kafkajs replaces one after removeBroker
 * or a metadata refresh without it, on a connection shared by every activity of the worker),
 * the send can make one request per object, each with the same records and fresh sequence
 * numbers (0..n-1, then n..2n-1), so the broker accepts both. The acknowledgement then names
 * the partition twice.
 *
 * The checks are exact — fewer OR more records than sent fail the attempt:
 *  - every send: each topic-partition a send carried records for must be in its acknowledgement
 *    exactly once, and kafkajs's producer sequence for it (records it put in requests and did
 *    not roll back) must equal the records sent so far (free);
 *  - once, after the epoch's sends: per topic-partition, the log read read_uncommitted from the
 *    first offset this transaction was acknowledged at, up to the high watermark, must hold
 *    exactly as many records of this producer id and epoch as were sent, with sequence numbers
 *    0..sent-1 each once (one fetch per partition, typically).
 * Any failure is a TransientError: prepare (and the redo) abort the transaction and the attempt
 * is retried from the source offsets, with a new producer epoch.
 */
import { TransientError } from '../errors';
import { PreparedTransaction, producerSequence, type KafkaCluster, type ProducedOffsets, type TxnHandle } from './internals';
import { scanProducerRecords } from './scan';

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
  /** Records sent without an explicit partition (not counted per partition), and their topics. */
  unpartitioned = 0;
  readonly unpartitionedTopics = new Set<string>();

  override async send(topicMessages: { topic: string; messages: Message[] }[]): Promise<ProducedOffsets[]> {
    const res = await super.send(topicMessages);
    // Every acknowledgement entry: a partition acknowledged twice was written twice.
    const acked = new Map<string, number[]>();
    for (const r of res) {
      const k = `${r.topic}/${r.partition}`;
      acked.set(k, [...(acked.get(k) ?? []), r.baseOffset]);
    }
    const missing: string[] = [];
    const surplus: string[] = [];
    for (const { topic, messages } of topicMessages) {
      const perPartition = new Map<number, number>();
      let unpartitioned = 0;
      for (const m of messages) {
        if (m.partition === undefined || m.partition === null) unpartitioned++;
        else perPartition.set(m.partition, (perPartition.get(m.partition) ?? 0) + 1);
      }
      this.unpartitioned += unpartitioned;
      if (unpartitioned) this.unpartitionedTopics.add(topic);
      for (const [partition, n] of perPartition) {
        const k = `${topic}/${partition}`;
        const entry = this.sent.get(k) ?? { topic, partition, sent: 0 };
        entry.sent += n;
        const bases = acked.get(k) ?? [];
        if (bases.length === 0) missing.push(`${k} (${n} records)`);
        else if (bases.length > 1) surplus.push(`${k} acknowledged ${bases.length} times (at offsets ${bases.join(', ')}) for one request's ${n} records`);
        for (const base of bases) if (entry.firstOffset === undefined || base < entry.firstOffset) entry.firstOffset = base;
        this.sent.set(k, entry);
      }
    }
    // kafkajs's own count of what it put in requests for each partition (exact, free).
    if (!missing.length) {
      for (const e of this.sent.values()) {
        if (this.unpartitionedTopics.has(e.topic)) continue;
        const seq = producerSequence(this, e.topic, e.partition);
        if (seq > e.sent) surplus.push(`${e.topic}/${e.partition}: kafkajs produced ${seq} records (sequence) for ${e.sent} sent`);
      }
    }
    if (surplus.length) {
      throw new TransientError(`Kafka took more records than were sent in this transaction: ${surplus.join('; ')} (kafkajs sent a request twice); the attempt is redone`, { surplus });
    }
    if (missing.length) {
      throw new TransientError(`Kafka acknowledged a send without ${missing.join(', ')} (kafkajs dropped a partition whose leader moved during the send); the attempt is redone`, { missing });
    }
    return res;
  }
}

/**
 * Counts, per topic-partition the transaction wrote, its producer's records in the log from the
 * first acknowledged offset to the high watermark; throws a TransientError unless each holds
 * exactly the records sent, with sequence numbers 0..sent-1 each once (a surplus fails too: the
 * same records written twice in one transaction would otherwise be committed as duplicates).
 */
export async function checkLanded(cluster: KafkaCluster, txn: CountedTransaction, handle: TxnHandle, skipTopics: string[] = []): Promise<LandedCheck> {
  const t0 = Date.now();
  let fetches = 0;
  let partitions = 0;
  const short: string[] = [];
  const surplus: string[] = [];
  // Every partition written is scanned at once: a group's transaction writes many.
  const check = async (p: SentPartition) => {
    if (p.firstOffset === undefined) {
      short.push(`${p.topic}[${p.partition}]: ${p.sent} sent, none acknowledged`);
      return;
    }
    const c = await scanProducerRecords(cluster, { topic: p.topic, partition: p.partition, fromOffset: p.firstOffset, producerId: handle.producerId, producerEpoch: handle.producerEpoch, expected: p.sent });
    fetches += c.fetches;
    const where = `${p.topic}[${p.partition}]: ${p.sent} sent and acknowledged, ${c.found} in the log from offset ${p.firstOffset} (high watermark ${c.highWatermark})`;
    if (c.found > p.sent || c.distinctSequences < c.found) surplus.push(`${where}, sequences ${c.minSequence}..${c.maxSequence} (${c.distinctSequences} distinct)`);
    else if (c.found < p.sent) short.push(where);
    else if (!txn.unpartitionedTopics.has(p.topic) && (c.minSequence !== 0 || c.maxSequence !== p.sent - 1)) {
      // As many as sent, but not sequences 0..sent-1: records of this transaction lie before the
      // first acknowledged offset (a request never acknowledged), so the count is not the whole.
      surplus.push(`${where}, but sequences ${c.minSequence}..${c.maxSequence} instead of 0..${p.sent - 1}`);
    }
  };
  const checked = [...txn.sent.values()].filter((p) => !skipTopics.includes(p.topic));
  partitions = checked.length;
  await Promise.all(checked.map(check));
  if (surplus.length) throw new TransientError(`the log holds more records of this transaction than were sent (duplicates) before commit: ${surplus.join('; ')}; the attempt is redone`, { surplus, short });
  if (short.length) throw new TransientError(`acknowledged records missing from the log before commit: ${short.join('; ')}; the attempt is redone`, { short });
  return { partitions, fetches, ms: Date.now() - t0 };
}
