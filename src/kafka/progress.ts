/**
 * Progress markers: one small record per epoch and source partition, written to the
 * pipeline's progress topic (partition = source partition) inside the epoch's Kafka
 * transaction. A marker says how the transaction ended on its own progress partition; Kafka
 * can end one transaction differently on different partitions (a split, docs/design.md §6.15),
 * so an epoch's outcome is judged on every partition it wrote (../outcome.ts). Only for prepare
 * results of older versions (no `written`) do the markers stand for the whole Kafka side.
 */
import { pollUntil } from '../poll';
import { fetchPartition, ISOLATION, latestOffset, type KafkaCluster } from './internals';

export interface Marker {
  pipeline: string;
  partition: number;
  epoch: number;
  start: number;
  end: number;
  records: number;
  redo: boolean;
  /** The XA branch history decided for the epoch ('gtrid#bqual'); absent on markers of older versions and on redos after a restart. */
  xid?: string;
}

export const encodeMarker = (m: Marker) => JSON.stringify(m);

export function decodeMarker(value: Buffer | null): Marker | null {
  if (!value) return null;
  try {
    const m = JSON.parse(value.toString('utf8')) as Marker;
    return typeof m.epoch === 'number' && typeof m.end === 'number' ? m : null;
  } catch {
    return null;
  }
}

/**
 * Waits until the progress partition's last stable offset has passed `offset`, i.e. the
 * transaction that wrote the record at `offset` has been decided (committed or aborted).
 */
export async function waitDecided(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  offset: number,
  opts: { timeoutMs: number; onWait?: () => void },
): Promise<void> {
  let lso = -1;
  await pollUntil(
    async () => {
      lso = await latestOffset(cluster, topic, partition, ISOLATION.READ_COMMITTED);
      return lso > offset ? true : undefined;
    },
    {
      ...opts,
      everyMs: 250,
      onTimeout: () =>
        new Error(
          `transaction at ${topic}[${partition}]@${offset} still undecided after ${opts.timeoutMs} ms (LSO ${lso})`,
        ),
    },
  );
}

/** Committed markers of `pipeline` on `partition` in [fromOffset, LSO). */
export async function committedMarkers(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  fromOffset: number,
): Promise<(Marker & { offset: number })[]> {
  const out: (Marker & { offset: number })[] = [];
  let offset = fromOffset;
  for (;;) {
    const r = await fetchPartition(cluster, {
      topic,
      partition,
      fromOffset: offset,
      maxBytes: 1 << 20,
      maxWaitMs: 0,
      isolation: ISOLATION.READ_COMMITTED,
    });
    for (const rec of r.records) {
      const m = decodeMarker(rec.value);
      if (m) out.push({ ...m, offset: rec.offset });
    }
    if (r.nextOffset <= offset || r.nextOffset >= r.lastStableOffset) return out;
    offset = r.nextOffset;
  }
}

/** The committed marker of `epoch`, searching from `fromOffset`; waits until that offset is decided. */
export async function findCommittedMarker(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  epoch: number,
  fromOffset: number,
  opts: { timeoutMs: number; onWait?: () => void },
): Promise<(Marker & { offset: number }) | null> {
  await waitDecided(cluster, topic, partition, fromOffset, opts);
  return (await committedMarkers(cluster, topic, partition, fromOffset)).find((m) => m.epoch === epoch) ?? null;
}

/** The last committed marker of the partition, or null when none was ever committed. */
export async function lastCommittedMarker(
  cluster: KafkaCluster,
  topic: string,
  partition: number,
  logStart: number,
): Promise<(Marker & { offset: number }) | null> {
  const lso = await latestOffset(cluster, topic, partition, ISOLATION.READ_COMMITTED);
  let window = 64;
  let to = lso;
  while (to > logStart) {
    const from = Math.max(logStart, to - window);
    const found = (await committedMarkers(cluster, topic, partition, from)).filter((m) => m.offset < to);
    const last = found[found.length - 1];
    if (last) return last;
    to = from;
    window *= 4;
  }
  return null;
}
