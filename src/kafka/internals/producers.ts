/** DescribeProducers: a partition leader's state of the producers writing to it. */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { byLeader, type KafkaCluster } from './cluster';

const Encoder = require('kafkajs/src/protocol/encoder');
const Decoder = require('kafkajs/src/protocol/decoder');
const { createErrorFromCode, failIfVersionNotSupported } = require('kafkajs/src/protocol/error');

/** DescribeProducers (KIP-664, Kafka 3.0+): the API key, not in kafkajs 2.2.4's table. */
export const DESCRIBE_PRODUCERS = 61;

/** One producer's state on a partition's leader, as DescribeProducers answers it. */
export interface ActiveProducer {
  producerId: number;
  producerEpoch: number;
  /** Sequence number of the producer's last record in the log under this epoch (-1: none). */
  lastSequence: number;
  lastTimestamp: number;
  coordinatorEpoch: number;
  /** First offset of its open transaction on the partition, -1 when none is open. */
  currentTxnStartOffset: number;
}

/** A flexible request's array of topics with their partition numbers (compact arrays and strings, each topic's empty tagged fields). */
export function writeCompactTopics(body: any, topics: { topic: string; partitions: number[] }[]): any {
  body.writeUVarInt(topics.length + 1);
  for (const t of topics) {
    body.writeUVarIntString(t.topic).writeUVarInt(t.partitions.length + 1);
    for (const p of t.partitions) body.writeInt32(p);
    body.writeUVarInt(0);
  }
  return body;
}

/**
 * The DescribeProducers v0 request: a flexible version (compact strings and arrays, tagged
 * fields). kafkajs writes request header v1; the empty tagged-field section that follows the
 * client id in header v2 is written here as the body's first byte.
 */
export function describeProducersRequest(topics: { topic: string; partitions: number[] }[]) {
  return {
    apiKey: DESCRIBE_PRODUCERS,
    apiVersion: 0,
    apiName: 'DescribeProducers',
    encode: async () => {
      const body = new Encoder().writeUVarInt(0); // request header v2: no tagged fields
      return writeCompactTopics(body, topics).writeUVarInt(0);
    },
  };
}

export interface DescribedPartition {
  topic: string;
  partition: number;
  errorCode: number;
  errorMessage: string | null;
  producers: ActiveProducer[];
}

/** Decodes a DescribeProducers v0 response after the correlation id (response header v1 starts with its tagged fields). */
export function decodeDescribeProducers(payload: Buffer): DescribedPartition[] {
  const d = new Decoder(payload);
  d.readTaggedFields();
  d.readInt32(); // throttle_time_ms
  const out: DescribedPartition[] = [];
  const topics = d.readUVarInt() - 1;
  for (let t = 0; t < topics; t++) {
    const topic: string = d.readUVarIntString();
    const partitions = d.readUVarInt() - 1;
    for (let p = 0; p < partitions; p++) {
      const partition: number = d.readInt32();
      const errorCode: number = d.readInt16();
      failIfVersionNotSupported(errorCode);
      const errorMessage: string | null = d.readUVarIntString();
      const producers: ActiveProducer[] = [];
      const n = d.readUVarInt() - 1;
      for (let i = 0; i < n; i++) {
        producers.push({
          producerId: Number(d.readInt64()),
          producerEpoch: d.readInt32(),
          lastSequence: d.readInt32(),
          lastTimestamp: Number(d.readInt64()),
          coordinatorEpoch: d.readInt32(),
          currentTxnStartOffset: Number(d.readInt64()),
        });
        d.readTaggedFields();
      }
      d.readTaggedFields();
      out.push({ topic, partition, errorCode, errorMessage, producers });
    }
    d.readTaggedFields();
  }
  d.readTaggedFields();
  return out;
}

/**
 * DescribeProducers for `parts`, one request per leader: each partition's active producers as
 * its leader holds them (the leader's in-memory producer state, no log read). A partition whose
 * leader moved refreshes the metadata and is asked again (at most 3 times); any other error,
 * or a broker without the API (Kafka before 3.0), is thrown with the partition named.
 */
export async function describeProducers(
  cluster: KafkaCluster,
  parts: { topic: string; partition: number }[],
): Promise<{ partitions: DescribedPartition[]; requests: number }> {
  let pending = parts;
  const done: DescribedPartition[] = [];
  let requests = 0;
  for (let round = 0; pending.length; round++) {
    const moved: { topic: string; partition: number }[] = [];
    await Promise.all(
      (await byLeader(cluster, pending)).map(async ({ nodeId, broker, mine, topics: grouped }) => {
        if (broker.versions && !broker.versions[DESCRIBE_PRODUCERS]) {
          throw new Error(
            `Kafka broker ${nodeId} does not support DescribeProducers (Kafka 3.0 or later is needed to check an epoch's writes before commit)`,
          );
        }
        const topics = grouped.map(({ topic, parts: ps }) => ({ topic, partitions: ps.map((p) => p.partition) }));
        requests++;
        const answer: DescribedPartition[] = await broker.connectionPool.send({
          request: describeProducersRequest(topics),
          response: {
            decode: async (payload: Buffer) => decodeDescribeProducers(payload),
            parse: async (x: DescribedPartition[]) => x,
          },
        });
        for (const p of mine) {
          const a = answer.find((x) => x.topic === p.topic && x.partition === p.partition);
          if (!a) throw new Error(`DescribeProducers: broker ${nodeId} did not answer for ${p.topic}[${p.partition}]`);
          if (a.errorCode === 0) done.push(a);
          else if ([3, 5, 6].includes(a.errorCode) && round < 3)
            moved.push(p); // unknown partition, no leader, not the leader
          else {
            const e = createErrorFromCode(a.errorCode);
            throw Object.assign(e, {
              message: `DescribeProducers ${p.topic}[${p.partition}]: ${a.errorMessage ?? e.message}`,
            });
          }
        }
      }),
    );
    if (moved.length) await cluster.raw.refreshMetadata();
    pending = moved;
  }
  return { partitions: done, requests };
}
