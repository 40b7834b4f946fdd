/** ListTransactions: the transactions every broker coordinates, by state. */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { withTimeout } from '../../poll';
import type { KafkaCluster } from './cluster';

const Encoder = require('kafkajs/src/protocol/encoder');
const Decoder = require('kafkajs/src/protocol/decoder');
const { createErrorFromCode, failIfVersionNotSupported } = require('kafkajs/src/protocol/error');

/** ListTransactions (KIP-664, Kafka 3.0+): the API key, not in kafkajs 2.2.4's table. */
export const LIST_TRANSACTIONS = 66;

/** How long listTransactions waits for a broker's answer. */
export const LIST_WAIT_MS = 5000;

/** A coordinator's states of a transactional id (Kafka's TransactionState names). */
export type TransactionState =
  | 'Empty'
  | 'Ongoing'
  | 'PrepareCommit'
  | 'PrepareAbort'
  | 'CompleteCommit'
  | 'CompleteAbort'
  | 'Dead'
  | 'PrepareEpochFence';

export interface ListedTransaction {
  transactionalId: string;
  producerId: number;
  state: TransactionState;
}

/**
 * The ListTransactions v0 request: a flexible version (compact arrays and strings, tagged
 * fields); the empty tagged-field section of request header v2 is the body's first byte (as in
 * ./producers). No producer id filter.
 */
export function listTransactionsRequest(states: TransactionState[]) {
  return {
    apiKey: LIST_TRANSACTIONS,
    apiVersion: 0,
    apiName: 'ListTransactions',
    encode: async () => {
      const body = new Encoder().writeUVarInt(0).writeUVarInt(states.length + 1);
      for (const s of states) body.writeUVarIntString(s);
      return body.writeUVarInt(1).writeUVarInt(0); // producer_id_filters: empty; tagged fields
    },
  };
}

/** Decodes a ListTransactions v0 response after the correlation id (response header v1 starts with its tagged fields). */
export function decodeListTransactions(payload: Buffer): {
  errorCode: number;
  transactions: ListedTransaction[];
} {
  const d = new Decoder(payload);
  d.readTaggedFields();
  d.readInt32(); // throttle_time_ms
  const errorCode: number = d.readInt16();
  failIfVersionNotSupported(errorCode);
  const unknownStates = d.readUVarInt() - 1;
  for (let i = 0; i < unknownStates; i++) d.readUVarIntString();
  const transactions: ListedTransaction[] = [];
  const n = d.readUVarInt() - 1;
  for (let i = 0; i < n; i++) {
    const transactionalId: string = d.readUVarIntString();
    const producerId = Number(d.readInt64());
    const state = d.readUVarIntString() as TransactionState;
    d.readTaggedFields();
    transactions.push({ transactionalId, producerId, state });
  }
  d.readTaggedFields();
  return { errorCode, transactions };
}

/**
 * The transactions in `states` on every broker of the cluster (each lists those it
 * coordinates; a principal sees only the ids it may describe; a broker without the API, Kafka
 * before 3.0, lists none). A broker that cannot be reached, answers an error (e.g. its
 * coordinator still loading) or does not answer within LIST_WAIT_MS (a frozen node would hold
 * the request for the whole request timeout) is in `failed` with the reason, not thrown:
 * callers use the list to do sooner what a timeout does anyway.
 */
export async function listTransactions(
  cluster: KafkaCluster,
  states: TransactionState[],
): Promise<{ transactions: ListedTransaction[]; failed: { nodeId: string; error: string }[] }> {
  await cluster.raw.refreshMetadataIfNecessary();
  const nodeIds: string[] = cluster.raw.getNodeIds();
  const failed: { nodeId: string; error: string }[] = [];
  const listed = await Promise.all(
    nodeIds.map(async (nodeId): Promise<ListedTransaction[]> => {
      try {
        const broker = await cluster.raw.findBroker({ nodeId });
        if (broker.versions && !broker.versions[LIST_TRANSACTIONS]) return [];
        const answer: ReturnType<typeof decodeListTransactions> = await withTimeout(
          broker.connectionPool.send({
            request: listTransactionsRequest(states),
            response: {
              decode: async (payload: Buffer) => decodeListTransactions(payload),
              parse: async (x: unknown) => x,
            },
          }),
          LIST_WAIT_MS,
          `Kafka broker ${nodeId}`,
        );
        if (answer.errorCode !== 0) throw createErrorFromCode(answer.errorCode);
        return answer.transactions;
      } catch (e) {
        failed.push({ nodeId, error: (e as Error).message });
        return [];
      }
    }),
  );
  return { transactions: listed.flat(), failed };
}
