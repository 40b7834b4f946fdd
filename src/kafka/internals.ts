/**
 * Every use of kafkajs internals lives here, behind a small typed surface with its own tests
 * (test/kafka-internals.test.ts). kafkajs 2.2.4 has no public API for:
 *  - reading an exact offset range of one partition without joining a consumer group,
 *  - the producer id and epoch of a transaction (needed to commit it from another process),
 *  - EndTxn for a transaction this process did not open,
 *  - ListOffsets with an explicit isolation level.
 * Flink reaches the same Kafka internals through reflection for the same reasons.
 */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { logLevel as LogLevel, type KafkaConfig } from 'kafkajs';

const Cluster = require('kafkajs/src/cluster');
const { createLogger } = require('kafkajs/src/loggers');
const LoggerConsole = require('kafkajs/src/loggers/console');
const createEosManager = require('kafkajs/src/producer/eosManager');
const createMessageProducer = require('kafkajs/src/producer/messageProducer');
const { DefaultPartitioner } = require('kafkajs/src/producer/partitioners');
const createRetry = require('kafkajs/src/retry');
const Batch = require('kafkajs/src/consumer/batch');
const { CONNECTION_STATUS } = require('kafkajs/src/network/connectionStatus');
const COORDINATOR_TYPES = require('kafkajs/src/protocol/coordinatorTypes');
const defaultSocketFactory = require('kafkajs/src/network/socketFactory');

export const ISOLATION = { READ_UNCOMMITTED: 0, READ_COMMITTED: 1 } as const;

export interface RawRecord {
  offset: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, Buffer | string | (Buffer | string)[] | undefined>;
  timestamp: string;
}

export interface FetchResult {
  /** Records visible at the requested isolation level (aborted and control records removed). */
  records: RawRecord[];
  /** Offset to fetch next: past every record returned by the broker, visible or not. */
  nextOffset: number;
  highWatermark: number;
  lastStableOffset: number;
  logStartOffset: number;
}

export interface TxnHandle {
  transactionalId: string;
  producerId: number;
  producerEpoch: number;
}

export type EndTxnOutcome = 'ok' | 'fenced' | 'invalid-state';

export interface KafkaCluster {
  raw: any;
  logger: any;
  disconnect(): Promise<void>;
}

export interface ClusterOptions {
  brokers: string[];
  clientId: string;
  /** TLS and SASL exactly as kafkajs takes them (see kafkaClientConfig in ./client-config). */
  ssl?: KafkaConfig['ssl'];
  sasl?: KafkaConfig['sasl'];
  logLevel?: LogLevel;
  requestTimeout?: number;
}

/**
 * kafkajs logs every error response at ERROR before its retrier handles it (for example
 * CONCURRENT_TRANSACTIONS while a fenced transaction is being aborted). Those surface as
 * exceptions when they matter, so the per-response lines are dropped here.
 */
const quietLogCreator = (level: number) => {
  const log = LoggerConsole(level);
  return (entry: { log: { message?: string } }) => {
    if (/^(\[Connection\] )?Response /.test(entry.log.message ?? '')) return;
    log(entry);
  };
};

export async function connectCluster(opts: ClusterOptions): Promise<KafkaCluster> {
  const logger = createLogger({ level: opts.logLevel ?? LogLevel.WARN, logCreator: quietLogCreator });
  const raw = new Cluster({
    logger,
    brokers: opts.brokers,
    clientId: opts.clientId,
    ssl: opts.ssl,
    sasl: opts.sasl,
    socketFactory: defaultSocketFactory(),
    connectionTimeout: 3000,
    requestTimeout: opts.requestTimeout ?? 30000,
    enforceRequestTimeout: true,
    retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 3000 },
    offsets: new Map(),
    allowAutoTopicCreation: false,
    isolationLevel: ISOLATION.READ_COMMITTED,
    metadataMaxAge: 60000,
  });
  await raw.connect();
  return { raw, logger, disconnect: () => raw.disconnect() };
}

async function leaderOf(cluster: KafkaCluster, topic: string, partition: number): Promise<any> {
  return cluster.raw.findBroker({ nodeId: await leaderIdOf(cluster, topic, partition) });
}

async function leaderIdOf(cluster: KafkaCluster, topic: string, partition: number): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    try {
      await cluster.raw.addTargetTopic(topic);
      await cluster.raw.refreshMetadataIfNecessary();
      break;
    } catch (e) {
      // kafkajs refreshes the metadata of every topic this client ever read at once and fails the
      // whole refresh if one of them was deleted. Forget them all and try once more with this
      // topic alone (each caller adds its own back): a deleted topic fails only its own reads.
      if ((e as { type?: string }).type !== 'UNKNOWN_TOPIC_OR_PARTITION' || attempt > 0) throw e;
      cluster.raw.targetTopics = new Set();
    }
  }
  let nodeId = Object.keys(cluster.raw.findLeaderForPartitions(topic, [partition]))[0];
  if (nodeId === undefined) {
    // Metadata older than the partition (the topic grew): refresh once and look again.
    await cluster.raw.refreshMetadata();
    nodeId = Object.keys(cluster.raw.findLeaderForPartitions(topic, [partition]))[0];
    if (nodeId === undefined) throw new Error(`no leader known for ${topic}[${partition}]`);
  }
  return nodeId;
}

/** Error types of a fetch after which the client's metadata is refreshed (the partition moved). */
const LEADER_MOVED = ['NOT_LEADER_FOR_PARTITION', 'UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE'];

/**
 * One Fetch request for one partition from `fromOffset`, to its leader: the partition's part of
 * the response, or the error (after a metadata refresh when its type is one of `refreshOn`).
 */
/** Connections being opened, so that concurrent first fetches to one broker share one socket. */
const opening = new WeakMap<object, Promise<unknown>>();

/**
 * kafkajs opens a broker's fetch connection lazily and without a lock: two fetches issued at
 * once on a fresh connection each open a socket, and the first is never closed (the process
 * then stays alive until the broker drops it as idle, 10 minutes later). A group's epoch reads
 * all its partitions at once, so the fetch connection is opened here, once.
 */
async function fetchConnection(broker: any): Promise<void> {
  const connection = broker.connectionPool?.pool?.[1];
  if (!connection || connection.isConnected()) return;
  const p: Promise<unknown> = opening.get(connection) ?? connection.connect().finally(() => opening.delete(connection));
  opening.set(connection, p);
  await p;
}

async function fetchOne(
  cluster: KafkaCluster,
  args: { topic: string; partition: number; fromOffset: number; maxBytes: number; maxWaitMs: number; isolation: 0 | 1 },
  refreshOn: string[],
): Promise<any> {
  const broker = await leaderOf(cluster, args.topic, args.partition);
  await fetchConnection(broker);
  let response: any;
  try {
    response = await broker.fetch({
      replicaId: -1,
      isolationLevel: args.isolation,
      maxWaitTime: args.maxWaitMs,
      minBytes: 1,
      maxBytes: args.maxBytes,
      topics: [
        { topic: args.topic, partitions: [{ partition: args.partition, fetchOffset: String(args.fromOffset), maxBytes: args.maxBytes }] },
      ],
    });
  } catch (e: any) {
    if (refreshOn.includes(e?.type)) await cluster.raw.refreshMetadata().catch(() => undefined);
    throw e;
  }
  return checked(args, response.responses?.[0]?.partitions?.[0]);
}

/** Reads from `fromOffset` on one partition. Never joins a group. */
export async function fetchPartition(
  cluster: KafkaCluster,
  args: { topic: string; partition: number; fromOffset: number; maxBytes: number; maxWaitMs: number; isolation: 0 | 1 },
): Promise<FetchResult> {
  return fetchResult(args.topic, args.fromOffset, await fetchOne(cluster, args, LEADER_MOVED));
}

/**
 * Reads several partitions at once: one Fetch per leader carrying all of its partitions,
 * answered as soon as any of them has data (or after maxWaitMs). A broker answers one
 * connection's requests in order, so one long-polling Fetch per partition would make each wait
 * for the others' polls; a group's epoch reads all its partitions with one. `maxBytes` is per
 * partition. Results in the order of `parts`. Never joins a group.
 */
export async function fetchPartitions(
  cluster: KafkaCluster,
  parts: { topic: string; partition: number; fromOffset: number }[],
  opts: { maxBytes: number; maxWaitMs: number; isolation: 0 | 1 },
): Promise<FetchResult[]> {
  const leaders = await Promise.all(parts.map((p) => leaderIdOf(cluster, p.topic, p.partition)));
  const out: FetchResult[] = new Array(parts.length);
  await Promise.all(
    [...new Set(leaders)].map(async (nodeId) => {
      const mine = parts.map((p, i) => ({ ...p, i })).filter((_, i) => leaders[i] === nodeId);
      const broker = await cluster.raw.findBroker({ nodeId });
      await fetchConnection(broker);
      const topics = [...new Set(mine.map((p) => p.topic))].map((topic) => ({
        topic,
        partitions: mine.filter((p) => p.topic === topic).map((p) => ({ partition: p.partition, fetchOffset: String(p.fromOffset), maxBytes: opts.maxBytes })),
      }));
      let response: any;
      try {
        response = await broker.fetch({ replicaId: -1, isolationLevel: opts.isolation, maxWaitTime: opts.maxWaitMs, minBytes: 1, maxBytes: opts.maxBytes * mine.length, topics });
      } catch (e: any) {
        if (LEADER_MOVED.includes(e?.type)) await cluster.raw.refreshMetadata().catch(() => undefined);
        throw e;
      }
      for (const p of mine) {
        const pd = (response.responses ?? []).find((r: any) => r.topicName === p.topic || r.topic === p.topic)?.partitions?.find((x: any) => x.partition === p.partition);
        out[p.i] = fetchResult(p.topic, p.fromOffset, checked(p, pd));
      }
    }),
  );
  return out;
}

/** A partition's part of a fetch response, or the error it carries. */
function checked(args: { topic: string; partition: number }, pd: any): any {
  if (!pd) throw new Error(`empty fetch response for ${args.topic}[${args.partition}]`);
  if (pd.errorCode && pd.errorCode !== 0) {
    throw Object.assign(new Error(`fetch ${args.topic}[${args.partition}] failed with error code ${pd.errorCode}`), { errorCode: pd.errorCode });
  }
  return pd;
}

function fetchResult(topic: string, fromOffset: number, pd: any): FetchResult {
  const batch = new Batch(topic, String(fromOffset), pd);
  const within: any[] = batch.messagesWithinOffset;
  const last = within.length ? Number(within[within.length - 1].offset) : fromOffset - 1;
  return {
    // Not batch.messages: kafkajs's aborted-transaction filter misses interleaved transactions (see withoutAborted).
    records: withoutAborted(within, pd.abortedTransactions).map((m: any) => ({
      offset: Number(m.offset),
      key: m.key ?? null,
      value: m.value ?? null,
      headers: m.headers ?? {},
      timestamp: String(m.timestamp),
    })),
    nextOffset: last + 1,
    highWatermark: Number(pd.highWatermark),
    lastStableOffset: Number(pd.lastStableOffset),
    logStartOffset: Number(pd.logStartOffset ?? -1),
  };
}

/**
 * The records of a fetch that a read_committed reader may see: control records dropped, and
 * records of aborted transactions dropped. kafkajs's own filter (consumer/filterAbortedMessages)
 * assumes the broker lists aborted transactions by first offset and enters at most one per
 * record; the broker lists them in the order they were aborted. When two transactions on a
 * partition overlap and the later one is aborted first (pipelined epochs: e+1 prepared while e
 * commits, both timed out), kafkajs shows the earlier aborted transaction's records as
 * committed. Here every aborted transaction whose first offset was reached is entered.
 * (read_uncommitted fetches carry no aborted-transaction list: only control records go.)
 */
export function withoutAborted<M extends { offset: string | number; isControlRecord?: boolean; key?: Buffer | null; batchContext: { producerId: string | number; inTransaction: boolean } }>(
  messages: M[],
  aborted: { producerId: string | number; firstOffset: string | number }[] | null | undefined,
): M[] {
  const pending = [...(aborted ?? [])].sort((a, b) => Number(a.firstOffset) - Number(b.firstOffset));
  const open = new Set<string>();
  return messages.filter((m) => {
    while (pending.length && Number(pending[0]!.firstOffset) <= Number(m.offset)) open.add(String(pending.shift()!.producerId));
    const producer = String(m.batchContext.producerId);
    if (m.isControlRecord) {
      // An ABORT marker (control type 0) ends that producer's aborted transaction.
      if (m.key && m.key.length >= 4 && m.key.readInt16BE(2) === 0) open.delete(producer);
      return false;
    }
    return !(m.batchContext.inTransaction && open.has(producer));
  });
}

/** Latest offset of a partition: the LSO for read_committed, the high watermark for read_uncommitted. */
export async function latestOffset(cluster: KafkaCluster, topic: string, partition: number, isolation: 0 | 1): Promise<number> {
  const broker = await leaderOf(cluster, topic, partition);
  const res = await broker.listOffsets({
    replicaId: -1,
    isolationLevel: isolation,
    topics: [{ topic, partitions: [{ partition, timestamp: '-1' }] }],
  });
  const p = res.responses?.[0]?.partitions?.[0];
  if (!p || (p.errorCode && p.errorCode !== 0)) throw new Error(`listOffsets ${topic}[${partition}] failed (${p?.errorCode})`);
  return Number(p.offset);
}

/** Earliest retained offset of a partition. */
export async function earliestOffset(cluster: KafkaCluster, topic: string, partition: number): Promise<number> {
  const broker = await leaderOf(cluster, topic, partition);
  const res = await broker.listOffsets({
    replicaId: -1,
    isolationLevel: ISOLATION.READ_UNCOMMITTED,
    topics: [{ topic, partitions: [{ partition, timestamp: '-2' }] }],
  });
  const p = res.responses?.[0]?.partitions?.[0];
  if (!p || (p.errorCode && p.errorCode !== 0)) throw new Error(`listOffsets ${topic}[${partition}] failed (${p?.errorCode})`);
  return Number(p.offset);
}

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
    this.eos = createEosManager({ logger: ns, cluster: cluster.raw, transactionTimeout: transactionTimeoutMs, transactional: true, transactionalId });
    this.producer = createMessageProducer({
      logger: ns,
      cluster: cluster.raw,
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
    topicMessages: { topic: string; messages: { key?: Buffer | string | null; value: Buffer | string | null; partition?: number; headers?: Record<string, string | Buffer> }[] }[],
  ): Promise<ProducedOffsets[]> {
    if (!this.began) throw new Error('transaction not begun');
    const nonEmpty = topicMessages.filter((t) => t.messages.length > 0);
    if (nonEmpty.length === 0) return [];
    const res: any[] = await this.producer.sendBatch({ topicMessages: nonEmpty, acks: -1 });
    return res.map((r) => ({ topic: r.topicName, partition: r.partition, baseOffset: Number(r.baseOffset) }));
  }

  /** The source offsets (the next offset to read) of every partition the transaction consumed, in one request. */
  async sendOffsets(groupId: string, offsets: { topic: string; partition: number; offset: number }[]): Promise<void> {
    const topics = [...new Set(offsets.map((o) => o.topic))].map((topic) => ({
      topic,
      partitions: offsets.filter((o) => o.topic === topic).map((o) => ({ partition: o.partition, offset: String(o.offset) })),
    }));
    await this.eos.sendOffsets({ consumerGroupId: groupId, topics });
  }
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
    await broker.findGroupCoordinator({ groupId: transactionalId, coordinatorType: COORDINATOR_TYPES.TRANSACTION });
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
 * be resolved by reading the progress marker (see progress.ts).
 */
export async function endTxn(cluster: KafkaCluster, h: TxnHandle, commit: boolean): Promise<EndTxnOutcome> {
  // CONCURRENT_TRANSACTIONS (a commit of the same transaction from elsewhere still completing)
  // clears within milliseconds: start retrying soon.
  const retrier = createRetry({ retries: 10, initialRetryTime: 20, maxRetryTime: 2000 });
  return retrier(async (bail: (e: Error) => void) => {
    let coordinator: any;
    try {
      coordinator = await cluster.raw.findGroupCoordinator({ groupId: h.transactionalId, coordinatorType: COORDINATOR_TYPES.TRANSACTION });
      await coordinator.endTxn({
        transactionalId: h.transactionalId,
        producerId: h.producerId,
        producerEpoch: h.producerEpoch,
        transactionResult: commit,
      });
      return 'ok' as EndTxnOutcome;
    } catch (e: any) {
      switch (e?.type) {
        case 'INVALID_PRODUCER_EPOCH':
        case 'PRODUCER_FENCED':
        case 'INVALID_PRODUCER_ID_MAPPING':
          return 'fenced' as EndTxnOutcome;
        case 'INVALID_TXN_STATE':
          return 'invalid-state' as EndTxnOutcome;
        case 'CONCURRENT_TRANSACTIONS':
        case 'COORDINATOR_LOAD_IN_PROGRESS':
        case 'NOT_COORDINATOR':
        case 'COORDINATOR_NOT_AVAILABLE':
          throw e; // retried here
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

export interface ProducerRecord {
  offset: number;
  producerId: string;
  producerEpoch: number;
  /** The record's producer sequence number: its batch's first sequence plus its place in the batch. */
  sequence: number;
}

export interface ProducerFetch {
  /** The data records fetched (control records left out), with their batch's producer id and epoch. */
  records: ProducerRecord[];
  /** Offset to fetch next: past every record returned, control records included (`fromOffset` if none). */
  nextOffset: number;
  highWatermark: number;
}

/**
 * One read_uncommitted fetch (no wait) of one partition from `fromOffset`, with the producer id,
 * epoch and sequence number of each data record, which kafkajs's public consumer does not give:
 * what the producer-record scans of ./scan count.
 */
export async function fetchProducerRecords(
  cluster: KafkaCluster,
  args: { topic: string; partition: number; fromOffset: number; maxBytes: number },
): Promise<ProducerFetch> {
  const pd = await fetchOne(cluster, { ...args, maxWaitMs: 0, isolation: ISOLATION.READ_UNCOMMITTED }, [...LEADER_MOVED, 'FENCED_LEADER_EPOCH']);
  const within: any[] = new Batch(args.topic, String(args.fromOffset), pd).messagesWithinOffset;
  const records: ProducerRecord[] = [];
  for (const m of within) {
    if (m.isControlRecord) continue;
    const c = m.batchContext;
    records.push({ offset: Number(m.offset), producerId: String(c.producerId), producerEpoch: Number(c.producerEpoch), sequence: Number(c.firstSequence) + (Number(m.offset) - Number(c.firstOffset)) });
  }
  return {
    records,
    nextOffset: within.length ? Number(within[within.length - 1].offset) + 1 : args.fromOffset,
    highWatermark: Number(pd.highWatermark),
  };
}
