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
 * such a send would commit without those records (docs/reliability-runs.md, cluster campaign).
 *
 * The same code can also write a send's records TWICE in one transaction (the cluster campaign's
 * run of seed 20261202, docs/reliability-runs.md): sendMessages keys its per-broker requests by Broker
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
 *    not roll back) must not exceed the records sent so far (free; a shortfall is the next
 *    check's);
 *  - once, after the epoch's sends: per topic-partition but those of `skipTopics` (the epoch's
 *    sends skip the progress topic: its markers have the checks above only), the leader's state
 *    of this producer id (DescribeProducers, one request per leader broker) must be this producer
 *    epoch with last sequence number sent-1 and an open transaction. The broker appends a
 *    producer's batches only in sequence (from 0 after InitProducerId, each batch following the
 *    last, a repeated batch answered as a duplicate and not written), so last sequence sent-1
 *    means the log holds exactly sequences 0..sent-1 of this producer epoch: the records sent,
 *    each once. A dropped partition shows as a lower last sequence (its sequence numbers were
 *    reused), a request written twice as a higher one. Every acknowledged batch was replicated
 *    (acks=all), so a new leader answers the same.
 * Any failure is a TransientError: prepare (and the redo) abort the transaction and the attempt
 * is retried from the source offsets, with a new producer epoch.
 */
import { TransientError } from '../errors';
import type { WrittenParts } from '../protocol';
import {
  describeProducers,
  PreparedTransaction,
  producerSequence,
  type KafkaCluster,
  type ProducedOffsets,
  type TxnHandle,
} from './internals';

type Message = {
  key?: Buffer | string | null;
  value: Buffer | string | null;
  partition: number;
  headers?: Record<string, string | Buffer>;
};

/** Per topic-partition: records sent, and the offset of the first of them (its first acknowledgement's base offset). */
export interface SentPartition {
  topic: string;
  partition: number;
  sent: number;
  firstOffset: number;
}

export interface LandedCheck {
  partitions: number;
  /** DescribeProducers requests it took (one per leader broker, more when a leader moved). */
  requests: number;
  ms: number;
}

export class CountedTransaction extends PreparedTransaction {
  readonly sent = new Map<string, SentPartition>();

  /** Every message names its partition: the checks count per partition. */
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
      for (const m of messages) perPartition.set(m.partition, (perPartition.get(m.partition) ?? 0) + 1);
      for (const [partition, n] of perPartition) {
        const k = `${topic}/${partition}`;
        const bases = acked.get(k) ?? [];
        const entry = this.sent.get(k) ?? { topic, partition, sent: 0, firstOffset: bases[0] ?? -1 };
        entry.sent += n;
        if (bases.length === 0) missing.push(`${k} (${n} records)`);
        else if (bases.length > 1)
          surplus.push(
            `${k} acknowledged ${bases.length} times (at offsets ${bases.join(', ')}) for one request's ${n} records`,
          );
        this.sent.set(k, entry);
      }
    }
    // kafkajs's own count of what it put in requests for each partition (exact, free).
    if (!missing.length) {
      for (const e of this.sent.values()) {
        const seq = producerSequence(this, e.topic, e.partition);
        if (seq > e.sent)
          surplus.push(`${e.topic}/${e.partition}: kafkajs produced ${seq} records (sequence) for ${e.sent} sent`);
      }
    }
    if (surplus.length) {
      throw new TransientError(
        `Kafka took more records than were sent in this transaction: ${surplus.join('; ')} (kafkajs sent a request twice); the attempt is redone`,
        { surplus },
      );
    }
    if (missing.length) {
      throw new TransientError(
        `Kafka acknowledged a send without ${missing.join(', ')} (kafkajs dropped a partition whose leader moved during the send); the attempt is redone`,
        { missing },
      );
    }
    return res;
  }
}

/**
 * Where the transaction wrote, outside `skipTopic` (the progress markers, whose offsets the
 * prepare result names already): per topic, [partition, first offset] — what ./outcome reads the
 * transaction's markers after when its outcome must be found out (an ambiguous EndTxn, a redo).
 */
export function writtenParts(txn: CountedTransaction, skipTopic: string): WrittenParts {
  const out: WrittenParts = {};
  for (const p of txn.sent.values())
    if (p.topic !== skipTopic && p.firstOffset >= 0) (out[p.topic] ??= []).push([p.partition, p.firstOffset]);
  return out;
}

/**
 * Asks each written partition's leader for this producer's state (DescribeProducers); throws a
 * TransientError unless each holds exactly the records sent (see the top of this file).
 */
export async function checkLanded(
  cluster: KafkaCluster,
  txn: CountedTransaction,
  handle: TxnHandle,
  skipTopics: string[] = [],
): Promise<LandedCheck> {
  const t0 = Date.now();
  const checked = [...txn.sent.values()].filter((p) => !skipTopics.includes(p.topic));
  const { partitions, requests } = await describeProducers(cluster, checked);
  const short: string[] = [];
  const surplus: string[] = [];
  for (const p of checked) {
    const where = `${p.topic}[${p.partition}]: ${p.sent} sent (sequences 0..${p.sent - 1})`;
    const state = partitions
      .find((x) => x.topic === p.topic && x.partition === p.partition)
      ?.producers.find((x) => x.producerId === handle.producerId);
    if (!state) short.push(`${where}, producer ${handle.producerId} has no records there`);
    else if (state.producerEpoch !== handle.producerEpoch)
      short.push(
        `${where}, producer ${handle.producerId} is at epoch ${state.producerEpoch}, not this transaction's ${handle.producerEpoch} (fenced)`,
      );
    else if (state.lastSequence > p.sent - 1) surplus.push(`${where}, last sequence in the log ${state.lastSequence}`);
    else if (state.lastSequence < p.sent - 1) short.push(`${where}, last sequence in the log ${state.lastSequence}`);
    else if (state.currentTxnStartOffset < 0)
      short.push(`${where}, but no transaction of the producer is open there (aborted)`);
  }
  if (surplus.length)
    throw new TransientError(
      `the log holds more records of this transaction than were sent (duplicates) before commit: ${surplus.join('; ')}; the attempt is redone`,
      { surplus, short },
    );
  if (short.length)
    throw new TransientError(
      `acknowledged records missing from the log before commit: ${short.join('; ')}; the attempt is redone`,
      { short },
    );
  return { partitions: checked.length, requests, ms: Date.now() - t0 };
}
