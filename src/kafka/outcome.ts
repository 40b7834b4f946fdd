/**
 * The one place that finds out what happened to an epoch's Kafka side.
 *
 * EndTxn names no transaction, only (transactional id, producer id, epoch), and answers a commit
 * that cannot be done with a fencing or invalid-state error — whether the transaction committed
 * earlier (and the id moved on) or was aborted (broker timeout, a newer InitProducerId). And Kafka
 * does not always end a transaction alike on every partition: a coordinator killed right after
 * appending PrepareCommit (not yet replicated) can come back, act for seconds on stale metadata
 * as the coordinator of a term it lost and send COMMIT to some partitions while the real
 * coordinator aborts the transaction everywhere (docs/design.md §6.15). So an outcome that must
 * be found out is read on EVERY partition the transaction wrote — its progress markers and the
 * outputs and dead letters its prepare result names (`written`) — from the transaction markers
 * (control records) that follow its records there: all COMMIT → committed, all ABORT → aborted,
 * mixed → split, reported, and redone only where it aborted (../activities/kafka-side.ts).
 * EndTxn returns before the markers are written, so each read waits for its partition's marker.
 * Used by the commit, the redo, reconcile and `onceflow transactions`; where no history names the
 * transaction (a restarted pipeline's reconcile, `onceflow transactions`), `splitsInLog`
 * (./splits-in-log.ts) finds where it wrote from the log itself and judges it here.
 */
import { pollUntil } from '../poll';
import { TransientError } from '../errors';
import type { KafkaSplit, WrittenParts } from '../protocol';
import type { PipelineSpec } from '../spec';
import { ISOLATION, endTxn, latestOffset, producerPages, type KafkaCluster, type TxnHandle } from './internals';
import { findCommittedMarker, type Marker } from './progress';

/** How long a read waits for a transaction to be decided before it fails (and is retried). */
export const DECIDE_TIMEOUT_MS = 120_000;

/** One partition a transaction wrote, and the offset of its first record there. */
export interface TxnPart {
  topic: string;
  partition: number;
  from: number;
}

export const partName = (p: { topic: string; partition: number }) => `${p.topic}[${p.partition}]`;

/** The parts a prepare result names: its progress markers, then its outputs and dead letters (absent in results of older versions). */
export function txnParts(
  spec: PipelineSpec,
  markers: { partition: number; offset: number }[],
  written: WrittenParts | undefined,
): TxnPart[] {
  const parts = markers.map((m) => ({ topic: spec.progressTopic, partition: m.partition, from: m.offset }));
  for (const [topic, ps] of Object.entries(written ?? {}))
    for (const [partition, from] of ps) parts.push({ topic, partition, from });
  return parts;
}

/** A transaction of one producer on one partition: its producer epoch and, once its marker is in the log, how it ended there. */
interface TxnOnPart {
  producerId: string;
  producerEpoch: number;
  outcome?: 'committed' | 'aborted';
}

/**
 * The transactions of `producers` with records on `part` at or after `part.from`, in log order,
 * each ended by the first control record of its producer that follows its records. (A marker a
 * second coordinator sends for a transaction that already ended on the partition adds nothing:
 * the broker appends it, and readers ignore it, as here.)
 */
async function transactionsOn(cluster: KafkaCluster, part: TxnPart, producers: Set<string>): Promise<TxnOnPart[]> {
  const out: TxnOnPart[] = [];
  const open = new Map<string, TxnOnPart>();
  for await (const f of producerPages(cluster, {
    topic: part.topic,
    partition: part.partition,
    fromOffset: part.from,
  })) {
    const events = [
      ...f.records.map((r) => ({ ...r, control: undefined })),
      ...f.controls.map((c) => ({ ...c, control: c })),
    ].sort((a, b) => a.offset - b.offset);
    for (const e of events) {
      if (!producers.has(e.producerId)) continue;
      const t = open.get(e.producerId);
      if (e.control) {
        if (t) t.outcome = e.control.commit ? 'committed' : 'aborted';
        open.delete(e.producerId);
      } else if (!t) {
        const n: TxnOnPart = { producerId: e.producerId, producerEpoch: e.producerEpoch };
        open.set(e.producerId, n);
        out.push(n);
      }
    }
  }
  return out;
}

/** transactionsOn, read again every 250 ms until `decided` holds or DECIDE_TIMEOUT_MS passed (a TransientError: the activity retries). */
async function whenDecided<T>(
  cluster: KafkaCluster,
  part: TxnPart,
  producers: Set<string>,
  decided: (txns: TxnOnPart[]) => T | undefined,
  what: string,
  onWait?: () => void,
): Promise<T> {
  return pollUntil(async () => decided(await transactionsOn(cluster, part, producers)), {
    timeoutMs: DECIDE_TIMEOUT_MS,
    everyMs: 250,
    onWait,
    onTimeout: () =>
      new TransientError(
        `${what} on ${partName(part)} from offset ${part.from} still undecided after ${DECIDE_TIMEOUT_MS} ms`,
      ),
  });
}

/** How the transaction of `handle` ended on each of `parts`, in their order (waits for each part's marker). */
export async function outcomeOnParts(
  cluster: KafkaCluster,
  handle: Pick<TxnHandle, 'producerId' | 'producerEpoch'>,
  parts: TxnPart[],
  onWait?: () => void,
): Promise<('committed' | 'aborted')[]> {
  const pid = String(handle.producerId);
  const what = `transaction of producer ${pid} epoch ${handle.producerEpoch}`;
  return Promise.all(
    parts.map((part) =>
      whenDecided(
        cluster,
        part,
        new Set([pid]),
        (txns) => {
          const t = txns.find((x) => x.producerEpoch === handle.producerEpoch);
          if (!t)
            throw new Error(
              `${what}: none of its records on ${partName(part)} at or after offset ${part.from}, where its prepare was acknowledged`,
            );
          return t.outcome;
        },
        what,
        onWait,
      ),
    ),
  );
}

export interface KafkaVerdict {
  outcome: 'committed' | 'aborted';
  /** Committed on some parts and aborted on others: `outcome` is 'aborted' (the aborted parts must be redone). */
  split?: KafkaSplit;
}

/** A decided epoch's transaction: its handle (with where it wrote) and its progress markers. */
export interface DecidedTxn {
  handle: TxnHandle & { written?: WrittenParts };
  markers: { partition: number; offset: number }[];
}

/**
 * The outcome of a decided epoch's transaction whose EndTxn was ambiguous, read on every part it
 * wrote. Old prepare results (no `written`) are judged by their markers alone.
 */
export async function judgeTransaction(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  {
    handle,
    markers,
  }: {
    handle: Pick<TxnHandle, 'producerId' | 'producerEpoch'> & { written?: WrittenParts };
    markers: DecidedTxn['markers'];
  },
  onWait?: () => void,
): Promise<KafkaVerdict> {
  const parts = txnParts(spec, markers, handle.written);
  const seen = await outcomeOnParts(cluster, handle, parts, onWait);
  const committed = parts.filter((_, i) => seen[i] === 'committed').map(partName);
  const aborted = parts.filter((_, i) => seen[i] === 'aborted').map(partName);
  if (!aborted.length) return { outcome: 'committed' };
  if (!committed.length) return { outcome: 'aborted' };
  return {
    outcome: 'aborted',
    split: { producerId: handle.producerId, producerEpoch: handle.producerEpoch, committed, aborted },
  };
}

/** EndTxn(commit) of a prepared epoch from any process; an ambiguous answer is resolved on every part the transaction wrote. */
export async function commitOrFindOut(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  txn: DecidedTxn,
  onWait?: () => void,
): Promise<KafkaVerdict> {
  if ((await endTxn(cluster, txn.handle, true)) === 'ok') return { outcome: 'committed' };
  return judgeTransaction(cluster, spec, txn, onWait);
}

/**
 * The parts of `original` (a decided epoch's transaction) that already hold a committed copy of
 * its records there: the original committed on the part, or a later transaction of
 * `redoProducerId` (an earlier redo attempt of the same records) did. Call after the redo's
 * InitProducerId, which completes every earlier transaction of its id; a part whose transactions
 * have no marker yet is read again until they do. Keys are partName()s.
 */
export async function committedCopies(
  cluster: KafkaCluster,
  original: Pick<TxnHandle, 'producerId' | 'producerEpoch'>,
  parts: TxnPart[],
  redoProducerId: number,
  onWait?: () => void,
): Promise<Set<string>> {
  const o = String(original.producerId);
  const r = String(redoProducerId);
  const done = await Promise.all(
    parts.map((part) =>
      whenDecided(
        cluster,
        part,
        new Set([o, r]),
        (txns) =>
          txns.some((t) => !t.outcome)
            ? undefined
            : txns.some(
                (t) =>
                  t.outcome === 'committed' &&
                  ((t.producerId === o && t.producerEpoch === original.producerEpoch) || t.producerId === r),
              ),
        `an earlier attempt of producer ${o}/${r}`,
        onWait,
      ),
    ),
  );
  return new Set(parts.filter((_, i) => done[i]).map(partName));
}

/** The committed progress marker of `epoch`, searching from `fromOffset` once it is decided; null = no marker of the epoch committed. */
export async function epochMarker(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  fromOffset: number,
  onWait?: () => void,
): Promise<(Marker & { offset: number }) | null> {
  // Nothing was ever written at or after fromOffset: no marker of the epoch can exist there.
  if ((await latestOffset(cluster, spec.progressTopic, partition, ISOLATION.READ_UNCOMMITTED)) <= fromOffset)
    return null;
  return findCommittedMarker(cluster, spec.progressTopic, partition, epoch, fromOffset, {
    timeoutMs: DECIDE_TIMEOUT_MS,
    ...(onWait ? { onWait } : {}),
  });
}
