/** An epoch's Kafka side: its records, dead letters, progress marker and source offsets in one transaction; its redo. */
import { TransientError } from '../errors';
import { endTxn } from '../kafka/internals';
import { CountedTransaction, checkLanded } from '../kafka/landed';
import { epochMarker } from '../kafka/outcome';
import { encodeMarker, type Marker } from '../kafka/progress';
import { consumerGroupId, transactionalId, type PipelineSpec } from '../spec';
import { applyTransform, tableMap, type Applied, type KafkaMessage } from './apply';
import type { ActivityContext } from './context';
import { readingSource, readRange, type Src } from './source';

/** Bytes of records per produce request: below the broker's default message.max.bytes (1 MiB) per batch. */
const REQUEST_BYTES = 512 * 1024;
const messageBytes = (m: KafkaMessage) =>
  64 + (m.key?.length ?? 0) + (m.value?.length ?? 0) + (m.headers ? Object.entries(m.headers).reduce((a, [k, v]) => a + k.length + v.length, 0) : 0);

/** The transaction of epoch `epoch` uses slot epoch mod pool (a pool ≥ 2 lets e+1 prepare while e awaits its commit). */
export const epochTransactionalId = (spec: PipelineSpec, partition: number, epoch: number) => transactionalId(spec.name, partition, epoch % spec.kafkaSink.transactionalIdPool);

/** One source partition's part of a transaction: its progress marker and where it read. */
export interface SentPart {
  marker: Marker;
  src: Src;
}

/**
 * Outputs and dead letters in requests of up to REQUEST_BYTES, the progress markers (one per
 * source partition, each in its own progress partition) with the last request, then the source
 * offsets while the partition leaders confirm the log holds exactly what was sent (checkLanded:
 * a TransientError otherwise). Returns each marker's offset, in the order of `parts`.
 */
export async function sendEpoch(ctx: ActivityContext, txn: CountedTransaction, spec: PipelineSpec, applied: Pick<Applied, 'outputs' | 'deadLetters'>, parts: SentPart[]): Promise<number[]> {
  const all = [...applied.outputs.map((msg) => ({ topic: spec.kafkaSink.topic, msg })), ...applied.deadLetters.map((msg) => ({ topic: spec.deadLetterTopic, msg }))];
  let markerOffsets: (number | undefined)[] = [];
  let i = 0;
  do {
    const out: KafkaMessage[] = [];
    const dl: KafkaMessage[] = [];
    let bytes = 0;
    for (; i < all.length && (bytes === 0 || bytes < REQUEST_BYTES); i++) {
      const x = all[i]!;
      (x.topic === spec.kafkaSink.topic ? out : dl).push(x.msg);
      bytes += messageBytes(x.msg);
    }
    const last = i >= all.length;
    const markers = parts.map(({ marker }) => ({ key: String(marker.partition), value: encodeMarker(marker), partition: marker.partition }));
    const res = await txn.send([
      { topic: spec.kafkaSink.topic, messages: out },
      { topic: spec.deadLetterTopic, messages: dl },
      ...(last ? [{ topic: spec.progressTopic, messages: markers }] : []),
    ]);
    // One marker per progress partition: the partition's base offset is its marker's offset.
    if (last) markerOffsets = parts.map(({ marker }) => res.find((r) => r.topic === spec.progressTopic && r.partition === marker.partition)?.baseOffset);
    ctx.heartbeat();
  } while (i < all.length);
  const missing = parts.filter((_, k) => markerOffsets[k] === undefined).map(({ marker }) => marker.partition);
  if (missing.length) throw new Error(`progress marker of source partition ${missing.join(', ')} was not acknowledged`);
  // The source offsets and, meanwhile, the check that the log holds every acknowledged output and
  // dead letter, each once (src/kafka/landed.ts; the markers' acks were checked above). Both end
  // before this returns: nothing may commit or abort the transaction with a request in flight.
  const [offsets, landed] = await Promise.allSettled([
    txn.sendOffsets(
      consumerGroupId(spec.name),
      parts.map(({ marker, src }) => ({ topic: src.topic, partition: src.partition, offset: marker.end })),
    ),
    checkLanded(ctx.cluster, txn, txn.handle(), [spec.progressTopic]),
  ]);
  for (const r of [landed, offsets]) if (r.status === 'rejected') throw r.reason;
  return markerOffsets as number[];
}

/**
 * The broker aborted the epoch's transaction (timeout, or a zombie's InitProducerId): produce the
 * epoch again in a fresh transaction and commit it. InitProducerId first completes every earlier
 * transaction of the id, then the marker read says definitively whether one of them (an earlier
 * redo attempt) committed the epoch after all. Returns false when nothing had to be redone.
 */
export async function redoKafkaSide(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  e: { epoch: number; start: number; end: number; xid?: string; markerFrom: number },
  src: Src,
): Promise<boolean> {
  // Counted, like prepare's (src/kafka/landed.ts): every send acknowledges each partition it
  // carried exactly once, and before the commit the log holds exactly the records sent.
  const txn = new CountedTransaction(ctx.cluster, epochTransactionalId(spec, partition, e.epoch), spec.kafkaSink.transactionTimeoutMs);
  const handle = await txn.begin();
  if (await epochMarker(ctx.cluster, spec, partition, e.epoch, e.markerFrom, ctx.heartbeat)) return false;
  const records = await readingSource(ctx.admin, spec, src, () => readRange(ctx.cluster, src.topic, src.partition, e.start, e.end, ctx.heartbeat));
  const applied = await applyTransform(spec, ctx.transforms.get(spec.transform, spec.name), records, ctx.transformCtx(spec, partition, e.epoch), tableMap(spec), src.layout);
  const marker: Marker = { pipeline: spec.name, partition, epoch: e.epoch, start: e.start, end: e.end, records: records.length, redo: true, ...(e.xid ? { xid: e.xid } : {}) };
  try {
    await sendEpoch(ctx, txn, spec, applied, [{ marker, src }]);
  } catch (err) {
    // Never commit a redo the checks refused: abort it now (the retried redo's InitProducerId
    // would abort it too) and let the activity retry the redo from the source offsets.
    await endTxn(ctx.cluster, handle, false).catch(() => undefined);
    throw err;
  }
  const outcome = await endTxn(ctx.cluster, handle, true);
  if (outcome !== 'ok') throw new TransientError(`redo transaction of epoch ${e.epoch} was not committed (${outcome}); retrying the redo`);
  ctx.observe({ kind: 'redo', pipeline: spec.name, partition, side: 'kafka' });
  return true;
}
