/**
 * WriteTxnMarkers: what a transaction coordinator sends a partition leader to end a transaction
 * there. onceflow never ends its transactions this way; the fault `split=…` (src/faults.ts) uses
 * it to split one as Kafka did in docs/cluster-run9.md — a coordinator acting on a term it had
 * lost sent COMMIT to some of the transaction's partitions while the real coordinator aborted
 * it. The request is the broker-to-broker one (CLUSTER_ACTION on a secured cluster), so only the
 * plain test stacks accept it.
 */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { byLeader, type KafkaCluster, type TxnHandle } from './cluster';
import { describeProducers, writeCompactTopics } from './producers';
import { endTxn } from './transaction';

const Encoder = require('kafkajs/src/protocol/encoder');
const Decoder = require('kafkajs/src/protocol/decoder');
const { createErrorFromCode } = require('kafkajs/src/protocol/error');

/** WriteTxnMarkers' API key: kafkajs 2.2.4 lists it but implements no request for it. */
export const WRITE_TXN_MARKERS = 27;

/** The WriteTxnMarkers v1 request (flexible: compact strings and arrays, tagged fields; Kafka 2.8 to 4.x) for one producer's transaction. */
export function writeTxnMarkersRequest(
  h: Pick<TxnHandle, 'producerId' | 'producerEpoch'>,
  commit: boolean,
  coordinatorEpoch: number,
  topics: { topic: string; partitions: number[] }[],
) {
  return {
    apiKey: WRITE_TXN_MARKERS,
    apiVersion: 1,
    apiName: 'WriteTxnMarkers',
    encode: async () => {
      const body = new Encoder().writeUVarInt(0); // request header v2: no tagged fields
      body.writeUVarInt(2); // one marker
      body.writeInt64(h.producerId).writeInt16(h.producerEpoch).writeBoolean(commit);
      writeCompactTopics(body, topics).writeInt32(coordinatorEpoch).writeUVarInt(0);
      return body.writeUVarInt(0);
    },
  };
}

/** Per partition of the response, its error code (0: the marker is in the log). */
export function decodeWriteTxnMarkers(payload: Buffer): { topic: string; partition: number; errorCode: number }[] {
  const d = new Decoder(payload);
  d.readTaggedFields();
  const out: { topic: string; partition: number; errorCode: number }[] = [];
  const markers = d.readUVarInt() - 1;
  for (let m = 0; m < markers; m++) {
    d.readInt64();
    const topics = d.readUVarInt() - 1;
    for (let t = 0; t < topics; t++) {
      const topic: string = d.readUVarIntString();
      const partitions = d.readUVarInt() - 1;
      for (let p = 0; p < partitions; p++) {
        out.push({ topic, partition: d.readInt32(), errorCode: d.readInt16() });
        d.readTaggedFields();
      }
      d.readTaggedFields();
    }
    d.readTaggedFields();
  }
  d.readTaggedFields();
  return out;
}

/**
 * Splits the open transaction of `h`: a COMMIT marker to the leader of each of `commitParts`,
 * then EndTxn(abort) through the real coordinator, which aborts the transaction on every other
 * partition (on the committed ones its ABORT comes after the COMMIT and changes nothing). The
 * COMMIT carries the coordinator epoch the partitions last saw for this producer — what the stale
 * coordinator of docs/cluster-run9.md sent: a leader refuses an older one
 * (TRANSACTION_COORDINATOR_FENCED), and the real coordinator's epoch is at least that.
 */
export async function forceSplit(
  cluster: KafkaCluster,
  h: TxnHandle,
  commitParts: { topic: string; partition: number }[],
): Promise<void> {
  const { partitions } = await describeProducers(cluster, commitParts);
  const coordinatorEpoch = Math.max(
    0,
    ...partitions.flatMap((p) =>
      p.producers.filter((x) => x.producerId === h.producerId).map((x) => x.coordinatorEpoch),
    ),
  );
  await Promise.all(
    (await byLeader(cluster, commitParts)).map(async ({ nodeId, broker, topics }) => {
      const answer = await broker.connectionPool.send({
        request: writeTxnMarkersRequest(
          h,
          true,
          coordinatorEpoch,
          topics.map(({ topic, parts }) => ({ topic, partitions: parts.map((p) => p.partition) })),
        ),
        response: { decode: async (payload: Buffer) => decodeWriteTxnMarkers(payload), parse: async (x: unknown) => x },
      });
      for (const a of answer as { topic: string; partition: number; errorCode: number }[]) {
        if (a.errorCode !== 0) {
          const e = createErrorFromCode(a.errorCode);
          throw Object.assign(e, {
            message: `WriteTxnMarkers to broker ${nodeId} for ${a.topic}[${a.partition}]: ${e.message}`,
          });
        }
      }
    }),
  );
  if ((await endTxn(cluster, h, false)) !== 'ok')
    throw new Error(`forced split: EndTxn(abort) of producer ${h.producerId} epoch ${h.producerEpoch} was refused`);
}
