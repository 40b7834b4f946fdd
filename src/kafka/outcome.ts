/**
 * The one place that finds out what happened to an epoch's Kafka side.
 *
 * EndTxn names no transaction, only (transactional id, producer id, epoch), and answers a commit
 * that cannot be done with a fencing or invalid-state error — whether the transaction committed
 * earlier (and the id moved on) or was aborted (broker timeout, a newer InitProducerId). The
 * epoch's progress marker, written inside the transaction, settles it: committed ⇔ a committed
 * marker of the epoch exists once the progress partition's LSO has passed its offset. EndTxn
 * returns before the transaction markers are written, so the read waits for that LSO.
 * Used by the commit, the redo, reconcile and `onceflow transactions`.
 */
import type { PipelineSpec } from '../spec';
import { ISOLATION, endTxn, latestOffset, type KafkaCluster, type TxnHandle } from './internals';
import { findCommittedMarker, type Marker } from './progress';

/** How long a read waits for a transaction to be decided before it fails (and is retried). */
export const DECIDE_TIMEOUT_MS = 120_000;

/** The committed progress marker of `epoch`, searching from `fromOffset` once it is decided; null = the Kafka side did not commit. */
export async function epochMarker(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  fromOffset: number,
  onWait?: () => void,
): Promise<(Marker & { offset: number }) | null> {
  // Nothing was ever written at or after fromOffset: no marker of the epoch can exist there.
  if ((await latestOffset(cluster, spec.progressTopic, partition, ISOLATION.READ_UNCOMMITTED)) <= fromOffset) return null;
  return findCommittedMarker(cluster, spec.progressTopic, partition, epoch, fromOffset, { timeoutMs: DECIDE_TIMEOUT_MS, ...(onWait ? { onWait } : {}) });
}

/** EndTxn(commit) of a prepared epoch from any process; an ambiguous answer is resolved by its marker. */
export async function commitOrFindOut(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  prepared: { epoch: number; kafka: TxnHandle & { markerOffset: number } },
  onWait?: () => void,
): Promise<'committed' | 'aborted'> {
  if ((await endTxn(cluster, prepared.kafka, true)) === 'ok') return 'committed';
  return (await epochMarker(cluster, spec, partition, prepared.epoch, prepared.kafka.markerOffset, onWait)) ? 'committed' : 'aborted';
}
