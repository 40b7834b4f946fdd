/** An epoch's Kafka side: its records, dead letters, progress marker and source offsets in one transaction; its redo. */
import { TransientError } from '../errors';
import { endTxn, type TxnHandle } from '../kafka/internals';
import { CountedTransaction, checkLanded, writtenParts } from '../kafka/landed';
import { committedCopies, epochMarker, partName, txnParts } from '../kafka/outcome';
import { encodeMarker, type Marker } from '../kafka/progress';
import type { WrittenParts } from '../protocol';
import { consumerGroupId, type PipelineSpec } from '../spec';
import type { Applied, KafkaMessage } from './apply';
import type { ActivityContext } from './context';
import { unitTxnId } from './members';
import { reapply, type Src } from './source';

/**
 * How an epoch's records are cut into Produce requests: each partition's batch in a request below
 * the broker's default message.max.bytes (1 MiB), the request below its socket.request.max.bytes
 * (100 MiB) by far. Until 2026-12-07 the whole request was cut at 512 KiB, however many
 * partitions shared it (`npx tsx tools/bench/sends-probe.ts` measures both).
 */
export const REQUEST_LIMITS = { partitionBytes: 512 * 1024, requestBytes: 8 * 1024 * 1024 };
export type RequestLimits = typeof REQUEST_LIMITS;
const messageBytes = (m: KafkaMessage) =>
  64 +
  (m.key?.length ?? 0) +
  (m.value?.length ?? 0) +
  (m.headers ? Object.entries(m.headers).reduce((a, [k, v]) => a + k.length + v.length, 0) : 0);

/** One source partition's part of a transaction: its progress marker and where it read. */
export interface SentPart {
  marker: Marker;
  src: Src;
}

/** What sendEpoch wrote: each marker's offset (in the order of the parts) and where the outputs and dead letters went. */
export interface SentEpoch {
  markerOffsets: number[];
  written: WrittenParts;
}

/**
 * The next request from `all[from..]`: as many records as the limits let in (at least one), each
 * topic's in the order given. Returns them and where the next request starts.
 */
export function nextRequest<M extends KafkaMessage>(
  all: { topic: string; msg: M }[],
  from: number,
  limits: RequestLimits,
): { topics: Map<string, M[]>; next: number } {
  const topics = new Map<string, M[]>();
  const perPartition = new Map<string, Map<number, number>>();
  let bytes = 0;
  let i = from;
  for (; i < all.length; i++) {
    const { topic, msg } = all[i]!;
    const b = messageBytes(msg);
    const parts = perPartition.get(topic) ?? perPartition.set(topic, new Map()).get(topic)!;
    const had = parts.get(msg.partition) ?? 0;
    if (bytes > 0 && (had + b > limits.partitionBytes || bytes + b > limits.requestBytes)) break;
    parts.set(msg.partition, had + b);
    bytes += b;
    (topics.get(topic) ?? topics.set(topic, []).get(topic)!).push(msg);
  }
  return { topics, next: i };
}

/**
 * Outputs and dead letters in requests cut by REQUEST_LIMITS, the progress markers (one per
 * source partition, each in its own progress partition) with the last request, then the check
 * that the partition leaders hold exactly what was sent (checkLanded: a TransientError
 * otherwise); beside all of them the source offsets (AddOffsetsToTxn, TxnOffsetCommit: they need
 * nothing the sends return). `parts` may be empty (a split's repair whose markers committed):
 * then no marker and no source offsets are sent.
 */
export async function sendEpoch(
  ctx: ActivityContext,
  txn: CountedTransaction,
  spec: PipelineSpec,
  applied: Pick<Applied, 'outputs' | 'deadLetters'>,
  parts: SentPart[],
): Promise<SentEpoch> {
  const all = [
    ...applied.outputs.map((msg) => ({ topic: spec.kafkaSink.topic, msg })),
    ...applied.deadLetters.map((msg) => ({ topic: spec.deadLetterTopic, msg })),
  ];
  const offsets = parts.length
    ? txn.sendOffsets(
        consumerGroupId(spec.name),
        parts.map(({ marker, src }) => ({ topic: src.topic, partition: src.partition, offset: marker.end })),
      )
    : Promise.resolve();
  // Both end before this returns, also when one fails: nothing may commit or abort the
  // transaction with a request in flight.
  const [sent, offsetsSent] = await Promise.allSettled([sendRecords(ctx, txn, spec, all, parts), offsets]);
  for (const r of [sent, offsetsSent]) if (r.status === 'rejected') throw r.reason;
  return {
    markerOffsets: (sent as PromiseFulfilledResult<number[]>).value,
    written: writtenParts(txn, spec.progressTopic),
  };
}

/** sendEpoch's records and markers, and the landed check; the markers' offsets. */
async function sendRecords(
  ctx: ActivityContext,
  txn: CountedTransaction,
  spec: PipelineSpec,
  all: { topic: string; msg: KafkaMessage }[],
  parts: SentPart[],
): Promise<number[]> {
  let markerOffsets: (number | undefined)[] = [];
  let i = 0;
  do {
    const { topics, next } = nextRequest(all, i, REQUEST_LIMITS);
    i = next;
    const last = i >= all.length;
    const markers = parts.map(({ marker }) => ({
      key: String(marker.partition),
      value: encodeMarker(marker),
      partition: marker.partition,
    }));
    const res = await txn.send([
      { topic: spec.kafkaSink.topic, messages: topics.get(spec.kafkaSink.topic) ?? [] },
      { topic: spec.deadLetterTopic, messages: topics.get(spec.deadLetterTopic) ?? [] },
      ...(last ? [{ topic: spec.progressTopic, messages: markers }] : []),
    ]);
    // One marker per progress partition: the partition's base offset is its marker's offset.
    if (last)
      markerOffsets = parts.map(
        ({ marker }) => res.find((r) => r.topic === spec.progressTopic && r.partition === marker.partition)?.baseOffset,
      );
    ctx.heartbeat();
  } while (i < all.length);
  const missing = parts.filter((_, k) => markerOffsets[k] === undefined).map(({ marker }) => marker.partition);
  if (missing.length) throw new Error(`progress marker of source partition ${missing.join(', ')} was not acknowledged`);
  // The log holds every acknowledged output and dead letter, each once (src/kafka/landed.ts; the
  // markers' acks were checked above).
  await checkLanded(ctx.cluster, txn, txn.handle(), [spec.progressTopic]);
  return markerOffsets as number[];
}

/** The epoch a redo produces again; `original`, its decided transaction (from history, or from the log for a split reconcile found: src/kafka/splits-in-log.ts; absent otherwise in reconcile and for prepare results of older versions). */
export interface RedoEpoch {
  epoch: number;
  start: number;
  end: number;
  xid?: string;
  /** Where to look for a committed marker of the epoch (the original's marker offset, or reconcile's last committed marker). */
  markerFrom: number;
  original?: Pick<TxnHandle, 'producerId' | 'producerEpoch'> & { written?: WrittenParts };
}

/**
 * The broker aborted the epoch's transaction (timeout, a zombie's InitProducerId), wholly or on
 * some of its partitions (a split, src/kafka/outcome.ts): produce again what has no committed
 * copy, in a fresh transaction, and commit it. InitProducerId on the partition's own id first
 * completes every earlier transaction of that id (for a group member not the group's transaction,
 * whose markers the reads below wait for: docs/design.md §6.15); then the marker read says whether the marker is committed (by the
 * original or an earlier redo attempt), and with the original's `written`, each output and
 * dead-letter partition says the same (committedCopies). Only the rest is written: never a
 * committed part again, always an aborted one, even when the marker committed. Without
 * `written`, a committed marker means all is committed (as before splits were known). Returns
 * false when nothing had to be redone.
 */
export async function redoKafkaSide(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  e: RedoEpoch,
  src: Src,
): Promise<boolean> {
  // Counted, like prepare's (src/kafka/landed.ts): every send acknowledges each partition it
  // carried exactly once, and before the commit the log holds exactly the records sent.
  const txn = new CountedTransaction(
    ctx.cluster,
    unitTxnId(spec, { group: partition, solo: true }, e.epoch),
    spec.kafkaSink.transactionTimeoutMs,
  );
  const handle = await txn.begin();
  const markerDone = !!(await epochMarker(ctx.cluster, spec, partition, e.epoch, e.markerFrom, ctx.heartbeat));
  const parts = e.original?.written ? txnParts(spec, [], e.original.written) : undefined;
  if (markerDone && !parts?.length) return false;
  const covered =
    parts && e.original
      ? await committedCopies(ctx.cluster, e.original, parts, handle.producerId, ctx.heartbeat)
      : new Set<string>();
  if (markerDone && parts && covered.size === parts.length) return false;
  const { records, applied } = await reapply(ctx, spec, partition, e, src);
  const missing = (topic: string) => (m: KafkaMessage) => !covered.has(partName({ topic, partition: m.partition }));
  const outputs = applied.outputs.filter(missing(spec.kafkaSink.topic));
  const deadLetters = applied.deadLetters.filter(missing(spec.deadLetterTopic));
  const marker: Marker = {
    pipeline: spec.name,
    partition,
    epoch: e.epoch,
    start: e.start,
    end: e.end,
    records: records.length,
    redo: true,
    ...(e.xid ? { xid: e.xid } : {}),
  };
  if (markerDone && !outputs.length && !deadLetters.length) return false;
  try {
    await sendEpoch(ctx, txn, spec, { outputs, deadLetters }, markerDone ? [] : [{ marker, src }]);
  } catch (err) {
    // Never commit a redo the checks refused: abort it now (the retried redo's InitProducerId
    // would abort it too) and let the activity retry the redo from the source offsets.
    await endTxn(ctx.cluster, handle, false).catch(() => undefined);
    throw err;
  }
  const outcome = await endTxn(ctx.cluster, handle, true);
  if (outcome !== 'ok')
    throw new TransientError(`redo transaction of epoch ${e.epoch} was not committed (${outcome}); retrying the redo`);
  ctx.observe({ kind: 'redo', pipeline: spec.name, partition, side: 'kafka' });
  if (covered.size || markerDone) {
    ctx.warn(
      `split transaction repaired: epoch ${e.epoch} of source partition ${partition} written again only where it had aborted`,
      {
        producerId: e.original?.producerId,
        producerEpoch: e.original?.producerEpoch,
        rewritten: outputs.length + deadLetters.length + (markerDone ? 0 : 1),
        committedBefore: [...covered, ...(markerDone ? [partName({ topic: spec.progressTopic, partition })] : [])],
      },
    );
  }
  return true;
}
