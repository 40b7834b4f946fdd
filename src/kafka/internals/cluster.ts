/** The kafkajs Cluster onceflow talks to, partition leaders, and ListOffsets with an explicit isolation level. */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { setTimeout as sleep } from 'node:timers/promises';
import { logLevel as LogLevel, type KafkaConfig } from 'kafkajs';
import { kafkaLogCreator } from '../log';
import { coordinatorCache, type CoordinatorType } from './coordinators';

const Cluster = require('kafkajs/src/cluster');
const { createLogger } = require('kafkajs/src/loggers');
const defaultSocketFactory = require('kafkajs/src/network/socketFactory');

export const ISOLATION = { READ_UNCOMMITTED: 0, READ_COMMITTED: 1 } as const;

export interface TxnHandle {
  transactionalId: string;
  producerId: number;
  producerEpoch: number;
}

export type EndTxnOutcome = 'ok' | 'fenced' | 'invalid-state';

export interface KafkaCluster {
  raw: any;
  logger: any;
  /** The broker that coordinates a transactional id or a group, remembered until it fails as stale (./coordinators). */
  coordinator(key: string, type: CoordinatorType): Promise<any>;
  disconnect(): Promise<void>;
}

export interface ClusterOptions {
  brokers: string[];
  clientId: string;
  /** TLS and SASL exactly as kafkajs takes them (see kafkaClientConfig in ../client-config). */
  ssl?: KafkaConfig['ssl'];
  sasl?: KafkaConfig['sasl'];
  logLevel?: LogLevel;
  requestTimeout?: number;
}

export async function connectCluster(opts: ClusterOptions): Promise<KafkaCluster> {
  const logger = createLogger({ level: opts.logLevel ?? LogLevel.WARN, logCreator: kafkaLogCreator });
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
  return { raw, logger, coordinator: coordinatorCache(raw), disconnect: () => raw.disconnect() };
}

export async function leaderOf(cluster: KafkaCluster, topic: string, partition: number): Promise<any> {
  return cluster.raw.findBroker({ nodeId: await leaderIdOf(cluster, topic, partition) });
}

export async function leaderIdOf(cluster: KafkaCluster, topic: string, partition: number): Promise<string> {
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

/**
 * `parts` by the broker that leads them, each with its index in `parts`, and with its topics
 * already grouped as a request lists them: how a request is sent once per leader.
 */
export async function byLeader<P extends { topic: string; partition: number }>(
  cluster: KafkaCluster,
  parts: P[],
): Promise<
  {
    nodeId: string;
    broker: any;
    mine: (P & { i: number })[];
    topics: { topic: string; parts: (P & { i: number })[] }[];
  }[]
> {
  const leaders = await Promise.all(parts.map((p) => leaderIdOf(cluster, p.topic, p.partition)));
  return Promise.all(
    [...new Set(leaders)].map(async (nodeId) => {
      const mine = parts.map((p, i) => ({ ...p, i })).filter((_, i) => leaders[i] === nodeId);
      const topics = [...new Set(mine.map((p) => p.topic))].map((topic) => ({
        topic,
        parts: mine.filter((p) => p.topic === topic),
      }));
      return { nodeId, broker: await cluster.raw.findBroker({ nodeId }), mine, topics };
    }),
  );
}

/** Latest offset of a partition: the LSO for read_committed, the high watermark for read_uncommitted. */
export async function latestOffset(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  isolation: 0 | 1,
): Promise<number> {
  return listOffset(cluster, topic, partition, '-1', isolation);
}

/** Earliest retained offset of a partition. */
export async function earliestOffset(cluster: KafkaCluster, topic: string, partition: number): Promise<number> {
  return listOffset(cluster, topic, partition, '-2', ISOLATION.READ_UNCOMMITTED);
}

/**
 * The first offset of a partition whose record timestamp is at or after `ms` (ListOffsets by
 * time), or the high watermark when no record is that new.
 */
export async function offsetForTime(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  ms: number,
): Promise<number> {
  const offset = await listOffset(
    cluster,
    topic,
    partition,
    String(Math.max(0, Math.floor(ms))),
    ISOLATION.READ_UNCOMMITTED,
  );
  return offset >= 0 ? offset : latestOffset(cluster, topic, partition, ISOLATION.READ_UNCOMMITTED);
}

/** How many partitions a topic has now (metadata refreshed: the topic may have grown). */
export async function partitionCount(cluster: KafkaCluster, topic: string): Promise<number> {
  await leaderIdOf(cluster, topic, 0);
  await cluster.raw.refreshMetadata();
  return cluster.raw.findTopicPartitionMetadata(topic).length;
}

async function listOffset(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  timestamp: string,
  isolation: 0 | 1,
): Promise<number> {
  const res = await onLeader<any>(cluster, topic, partition, (broker) =>
    broker.listOffsets({
      replicaId: -1,
      isolationLevel: isolation,
      topics: [{ topic, partitions: [{ partition, timestamp }] }],
    }),
  );
  const p = res.responses?.[0]?.partitions?.[0];
  if (!p || (p.errorCode && p.errorCode !== 0))
    throw new Error(`listOffsets ${topic}[${partition}] failed (${p?.errorCode})`);
  return Number(p.offset);
}

/**
 * Answers a partition's leader gives while its leadership settles: the metadata already names it
 * (a topic created a moment ago, or a leader that just moved) but the broker has not yet taken the
 * partition over. Kafka's own clients refresh their metadata and send again; so does onLeader.
 */
export const LEADER_SETTLING = ['NOT_LEADER_FOR_PARTITION', 'LEADER_NOT_AVAILABLE'];

/** Error types after which the client's metadata is refreshed: a settling leader, or a partition the broker does not have (it moved). */
export const LEADER_MOVED = [...LEADER_SETTLING, 'UNKNOWN_TOPIC_OR_PARTITION'];

/** How long onLeader keeps asking while a partition's leadership settles, before the error is thrown. */
export const LEADER_SETTLE_MS = 10_000;

/**
 * `send` to the leader of topic[partition]. While the answer is LEADER_SETTLING, the metadata is
 * refreshed and `send` goes again to the leader it then names, after 50, 100, 200 … (at most
 * 1,000) ms, for `settleMs` at most; then, and for any other error, the error is thrown.
 */
export async function onLeader<T>(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  send: (broker: any) => Promise<T>,
  settleMs = LEADER_SETTLE_MS,
): Promise<T> {
  for (let waited = 0, pause = 50; ; waited += pause, pause = Math.min(2 * pause, 1000)) {
    try {
      return await send(await leaderOf(cluster, topic, partition));
    } catch (e) {
      if (!LEADER_SETTLING.includes((e as { type?: string }).type ?? '') || waited >= settleMs) throw e;
    }
    await cluster.raw.refreshMetadata().catch(() => undefined);
    await sleep(pause);
  }
}
