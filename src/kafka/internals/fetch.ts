/** Reads of exact offset ranges without a consumer group, and the aborted-transaction filter. */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */
import { ISOLATION, LEADER_MOVED, LEADER_SETTLING, byLeader, onLeader, type KafkaCluster } from './cluster';

const Batch = require('kafkajs/src/consumer/batch');

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

/**
 * One Fetch request for one partition from `fromOffset`, to its leader (onLeader: asked again
 * while the leadership settles): the partition's part of the response, or the error (after a
 * metadata refresh when its type is one of `refreshOn`).
 */
async function fetchOne(
  cluster: KafkaCluster,
  args: { topic: string; partition: number; fromOffset: number; maxBytes: number; maxWaitMs: number; isolation: 0 | 1 },
  refreshOn: string[],
): Promise<any> {
  const response = await onLeader<any>(cluster, args.topic, args.partition, async (broker) => {
    await fetchConnection(broker);
    try {
      return await broker.fetch({
        replicaId: -1,
        isolationLevel: args.isolation,
        maxWaitTime: args.maxWaitMs,
        minBytes: 1,
        maxBytes: args.maxBytes,
        topics: [
          {
            topic: args.topic,
            partitions: [{ partition: args.partition, fetchOffset: String(args.fromOffset), maxBytes: args.maxBytes }],
          },
        ],
      });
    } catch (e: any) {
      // onLeader refreshes before it asks again after a settling answer; the other moved answers refresh here.
      if (refreshOn.includes(e?.type) && !LEADER_SETTLING.includes(e?.type))
        await cluster.raw.refreshMetadata().catch(() => undefined);
      throw e;
    }
  });
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
  const out: FetchResult[] = new Array(parts.length);
  await Promise.all(
    (await byLeader(cluster, parts)).map(async ({ broker, mine, topics: grouped }) => {
      await fetchConnection(broker);
      const topics = grouped.map(({ topic, parts: ps }) => ({
        topic,
        partitions: ps.map((p) => ({
          partition: p.partition,
          fetchOffset: String(p.fromOffset),
          maxBytes: opts.maxBytes,
        })),
      }));
      let response: any;
      try {
        response = await broker.fetch({
          replicaId: -1,
          isolationLevel: opts.isolation,
          maxWaitTime: opts.maxWaitMs,
          minBytes: 1,
          maxBytes: opts.maxBytes * mine.length,
          topics,
        });
      } catch (e: any) {
        if (LEADER_MOVED.includes(e?.type)) await cluster.raw.refreshMetadata().catch(() => undefined);
        throw e;
      }
      for (const p of mine) {
        const pd = (response.responses ?? [])
          .find((r: any) => r.topicName === p.topic || r.topic === p.topic)
          ?.partitions?.find((x: any) => x.partition === p.partition);
        out[p.i] = fetchResult(p.topic, p.fromOffset, checked(p, pd));
      }
    }),
  );
  return out;
}

/**
 * A partition's part of a fetch response. (A partition's error code never reaches here: kafkajs's
 * Fetch response parser throws the first one it finds, typed, for the caller's refresh.)
 */
function checked(args: { topic: string; partition: number }, pd: any): any {
  if (!pd) throw new Error(`empty fetch response for ${args.topic}[${args.partition}]`);
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
export function withoutAborted<
  M extends {
    offset: string | number;
    isControlRecord?: boolean;
    key?: Buffer | null;
    batchContext: { producerId: string | number; inTransaction: boolean };
  },
>(messages: M[], aborted: { producerId: string | number; firstOffset: string | number }[] | null | undefined): M[] {
  const pending = [...(aborted ?? [])].sort((a, b) => Number(a.firstOffset) - Number(b.firstOffset));
  const open = new Set<string>();
  return messages.filter((m) => {
    while (pending.length && Number(pending[0]!.firstOffset) <= Number(m.offset))
      open.add(String(pending.shift()!.producerId));
    const producer = String(m.batchContext.producerId);
    if (m.isControlRecord) {
      // An ABORT marker (control type 0) ends that producer's aborted transaction.
      if (m.key && m.key.length >= 4 && m.key.readInt16BE(2) === 0) open.delete(producer);
      return false;
    }
    return !(m.batchContext.inTransaction && open.has(producer));
  });
}

export interface ProducerRecord {
  offset: number;
  producerId: string;
  producerEpoch: number;
  /** The record's producer sequence number: its batch's first sequence plus its place in the batch. */
  sequence: number;
  /** The record's timestamp (ms). */
  timestamp: number;
  /** The record's value, only when the fetch asked for values. */
  value?: Buffer | null;
}

/** A transaction marker (control record) in a partition's log: where one producer's transaction ended on it. */
export interface ControlRecord {
  offset: number;
  producerId: string;
  producerEpoch: number;
  commit: boolean;
}

export interface ProducerFetch {
  /** The data records fetched (control records left out), with their batch's producer id and epoch. */
  records: ProducerRecord[];
  /** The control records fetched (COMMIT or ABORT markers), in log order. */
  controls: ControlRecord[];
  /** Offset to fetch next: past every record returned, control records included (`fromOffset` if none). */
  nextOffset: number;
  highWatermark: number;
}

/**
 * One read_uncommitted fetch (no wait) of one partition from `fromOffset`, with the producer id,
 * epoch and sequence number of each data record and the transaction markers, which kafkajs's
 * public consumer does not give: how ../outcome reads where a transaction committed or aborted on
 * each partition it wrote, and what the tests' producer-record scans (test/support/scan.ts) count
 * as a witness independent of the broker's producer state that ../landed asks for.
 */
export async function fetchProducerRecords(
  cluster: KafkaCluster,
  args: { topic: string; partition: number; fromOffset: number; maxBytes: number; values?: boolean },
): Promise<ProducerFetch> {
  const { values, ...req } = args;
  const pd = await fetchOne(cluster, { ...req, maxWaitMs: 0, isolation: ISOLATION.READ_UNCOMMITTED }, [
    ...LEADER_MOVED,
    'FENCED_LEADER_EPOCH',
  ]);
  const within: any[] = new Batch(args.topic, String(args.fromOffset), pd).messagesWithinOffset;
  const records: ProducerRecord[] = [];
  const controls: ControlRecord[] = [];
  for (const m of within) {
    const c = m.batchContext;
    if (m.isControlRecord) {
      // The control record's key: version (int16), type (int16: 0 ABORT, 1 COMMIT).
      if (m.key && m.key.length >= 4)
        controls.push({
          offset: Number(m.offset),
          producerId: String(c.producerId),
          producerEpoch: Number(c.producerEpoch),
          commit: m.key.readInt16BE(2) === 1,
        });
      continue;
    }
    records.push({
      offset: Number(m.offset),
      producerId: String(c.producerId),
      producerEpoch: Number(c.producerEpoch),
      sequence: Number(c.firstSequence) + (Number(m.offset) - Number(c.firstOffset)),
      timestamp: Number(m.timestamp),
      ...(values ? { value: m.value } : {}),
    });
  }
  return {
    records,
    controls,
    nextOffset: within.length ? Number(within[within.length - 1].offset) + 1 : args.fromOffset,
    highWatermark: Number(pd.highWatermark),
  };
}

/**
 * fetchProducerRecords page after page from `fromOffset` up to the high watermark (read when
 * the scan began and re-read each page); a caller that found what it needs stops early (break or
 * return out of the for-await).
 */
export async function* producerPages(
  cluster: KafkaCluster,
  args: { topic: string; partition: number; fromOffset: number; maxBytes?: number; values?: boolean },
): AsyncGenerator<ProducerFetch> {
  for (let offset = args.fromOffset; ;) {
    const f = await fetchProducerRecords(cluster, { ...args, fromOffset: offset, maxBytes: args.maxBytes ?? 1 << 20 });
    yield f;
    if (f.nextOffset <= offset || f.nextOffset >= f.highWatermark) return;
    offset = f.nextOffset;
  }
}
