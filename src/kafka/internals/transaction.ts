/** A Kafka transaction prepared in one process and committed (EndTxn) from any. */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { type EndTxnOutcome, type KafkaCluster, type TxnHandle } from './cluster';
import { COORDINATOR } from './coordinators';
import { createMessageProducer } from './message-producer';
import { withFastProduce } from './produce-request';

const createEosManager = require('kafkajs/src/producer/eosManager');
const { DefaultPartitioner } = require('kafkajs/src/producer/partitioners');
const createRetry = require('kafkajs/src/retry');
const { CONNECTION_STATUS } = require('kafkajs/src/network/connectionStatus');

export interface ProducedOffsets {
  topic: string;
  partition: number;
  baseOffset: number;
}

/**
 * One Kafka transaction that is prepared here and may be committed anywhere.
 * begin() bumps the producer epoch (InitProducerId), which fences and aborts any earlier
 * open transaction of the same transactional id: the zombie fencing of docs/design.md.
 * The transaction is never committed through this object: see endTxn().
 */
export class PreparedTransaction {
  private readonly eos: any;
  private readonly producer: any;
  private began = false;

  constructor(
    private readonly cluster: KafkaCluster,
    readonly transactionalId: string,
    transactionTimeoutMs: number,
  ) {
    const ns = cluster.logger.namespace('onceflow.txn');
    this.eos = createEosManager({
      logger: ns,
      cluster: eosCluster(cluster),
      transactionTimeout: transactionTimeoutMs,
      transactional: true,
      transactionalId,
    });
    this.producer = createMessageProducer({
      logger: ns,
      // Its sends' Produce requests encoded by ./produce-request (the same bytes, a fraction of the CPU).
      cluster: withFastProduce(cluster.raw),
      partitioner: DefaultPartitioner(),
      eosManager: this.eos,
      idempotent: true,
      retrier: createRetry({ retries: 5, initialRetryTime: 100, maxRetryTime: 2000 }),
      getConnectionStatus: () => CONNECTION_STATUS.CONNECTED,
    });
  }

  async begin(): Promise<TxnHandle> {
    await this.eos.initProducerId().catch(async (e: unknown) => {
      throw await coordinatorRefusal(this.cluster, this.transactionalId, e);
    });
    this.eos.beginTransaction();
    this.began = true;
    return this.handle();
  }

  handle(): TxnHandle {
    return {
      transactionalId: this.transactionalId,
      producerId: Number(this.eos.getProducerId()),
      producerEpoch: Number(this.eos.getProducerEpoch()),
    };
  }

  /** Sends inside the transaction; resolves once the broker acknowledged (acks=all). */
  async send(
    topicMessages: {
      topic: string;
      messages: {
        key?: Buffer | string | null;
        value: Buffer | string | null;
        partition?: number;
        headers?: Record<string, string | Buffer>;
      }[];
    }[],
  ): Promise<ProducedOffsets[]> {
    if (!this.began) throw new Error('transaction not begun');
    const nonEmpty = topicMessages.filter((t) => t.messages.length > 0);
    if (nonEmpty.length === 0) return [];
    const res: any[] = await this.producer.sendBatch({ topicMessages: nonEmpty, acks: -1 });
    return res.map((r) => ({ topic: r.topicName, partition: r.partition, baseOffset: Number(r.baseOffset) }));
  }

  /** The source offsets (the next offset to read) of every partition the transaction consumed, in one call (AddOffsetsToTxn, then one TxnOffsetCommit for all). */
  async sendOffsets(groupId: string, offsets: { topic: string; partition: number; offset: number }[]): Promise<void> {
    const topics = [...new Set(offsets.map((o) => o.topic))].map((topic) => ({
      topic,
      partitions: offsets
        .filter((o) => o.topic === topic)
        .map((o) => ({ partition: o.partition, offset: String(o.offset) })),
    }));
    await this.eos.sendOffsets({ consumerGroupId: groupId, topics });
  }
}

/**
 * The cluster as kafkajs's eosManager uses it (refreshMetadataIfNecessary, findControllerBroker,
 * findGroupCoordinator; `retry` is undefined on a Cluster, so its retrier takes kafkajs's defaults
 * either way), with the coordinators remembered (./coordinators) instead of asked for before
 * every request.
 */
function eosCluster(cluster: KafkaCluster): object {
  return {
    refreshMetadataIfNecessary: () => cluster.raw.refreshMetadataIfNecessary(),
    findControllerBroker: () => cluster.raw.findControllerBroker(),
    findGroupCoordinator: ({ groupId, coordinatorType }: { groupId: string; coordinatorType: 0 | 1 }) =>
      cluster.coordinator(groupId, coordinatorType),
  };
}

/**
 * kafkajs turns every broker's refusal of FindCoordinator into "Failed to find group coordinator"
 * (it drops each answer), so a transactional id the principal may not use looks like a missing
 * coordinator. Ask one broker directly and return its refusal (TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
 * with its type), or `e` unchanged.
 */
async function coordinatorRefusal(cluster: KafkaCluster, transactionalId: string, e: unknown): Promise<unknown> {
  if ((e as Error | undefined)?.name !== 'KafkaJSGroupCoordinatorNotFound') return e;
  try {
    const broker = await cluster.raw.brokerPool.findConnectedBroker();
    await broker.findGroupCoordinator({ groupId: transactionalId, coordinatorType: COORDINATOR.TRANSACTION });
    return e;
  } catch (refusal) {
    return (refusal as { type?: string }).type ? refusal : e;
  }
}

/**
 * EndTxn for (transactionalId, producerId, epoch), from any process.
 * Kafka 3.x (transactions v1): a retried commit of a completed commit answers OK; commit after
 * an abort answers INVALID_TXN_STATE; commit after the epoch moved on (timeout abort, or a
 * newer transaction on the id) answers a fencing error. Anything but 'ok' is ambiguous and must
 * be resolved from the log: ../outcome.ts (commitOrFindOut) reads how the transaction ended on
 * every partition it wrote.
 */
export async function endTxn(cluster: KafkaCluster, h: TxnHandle, commit: boolean): Promise<EndTxnOutcome> {
  // CONCURRENT_TRANSACTIONS (a commit of the same transaction from elsewhere still completing)
  // clears within milliseconds: start retrying soon.
  const retrier = createRetry({ retries: 10, initialRetryTime: 20, maxRetryTime: 2000 });
  return retrier(async (bail: (e: Error) => void) => {
    try {
      const coordinator = await cluster.coordinator(h.transactionalId, COORDINATOR.TRANSACTION);
      await coordinator.endTxn({
        transactionalId: h.transactionalId,
        producerId: h.producerId,
        producerEpoch: h.producerEpoch,
        transactionResult: commit,
      });
      return 'ok' as EndTxnOutcome;
    } catch (e: any) {
      switch (e?.type) {
        // No PRODUCER_FENCED here: kafkajs 2.2 knows no such code (90), and a broker answers the
        // EndTxn v0–1 it sends with INVALID_PRODUCER_EPOCH instead (KIP-588).
        case 'INVALID_PRODUCER_EPOCH':
        case 'INVALID_PRODUCER_ID_MAPPING':
          return 'fenced' as EndTxnOutcome;
        case 'INVALID_TXN_STATE':
          return 'invalid-state' as EndTxnOutcome;
        case 'CONCURRENT_TRANSACTIONS':
        case 'GROUP_LOAD_IN_PROGRESS': // kafkajs's names: COORDINATOR_LOAD_IN_PROGRESS,
        case 'NOT_COORDINATOR_FOR_GROUP': // NOT_COORDINATOR and
        case 'GROUP_COORDINATOR_NOT_AVAILABLE': // COORDINATOR_NOT_AVAILABLE (the last two: STALE_COORDINATOR in ./coordinators)
          throw e; // retried here; a stale coordinator was forgotten, so the retry asks for it again
        default:
          if (e?.retriable === false && e?.type) bail(e);
          throw e;
      }
    }
  });
}

/**
 * The sequence number kafkajs would give the next record of `txn` to a topic-partition: since
 * begin() (InitProducerId resets it) the number of records of every produce request kafkajs
 * made for that partition and did not roll back on a failure. It counts what kafkajs SENT, so a
 * request that carried records a second time in one send (sendMessages keys its per-broker
 * requests by Broker object: one node under two objects gets two requests, each with every
 * partition that node leads) shows up as more than the caller sent.
 */
export function producerSequence(txn: PreparedTransaction, topic: string, partition: number): number {
  return Number((txn as any).eos.getSequence(topic, partition));
}
