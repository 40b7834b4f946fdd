/**
 * The epoch protocol's data (what travels through workflow history: offsets, ids and
 * transaction handles — never records) and its life cycle as an explicit transition table.
 *
 * Pure module: imported by workflows and activities alike.
 */
import type { PipelineSpec } from '../spec';

/** A prepared Kafka transaction: enough for any process to commit it with EndTxn. */
export interface KafkaHandle {
  transactionalId: string;
  producerId: number;
  producerEpoch: number;
  /** Offset of this epoch's progress marker in the progress topic (partition = source partition). */
  markerOffset: number;
  /**
   * Where the transaction wrote outputs and dead letters: per topic, [partition, offset of its
   * first record there]. Read when the outcome must be found out, so that a transaction Kafka
   * split (committed on some partitions, aborted on others) is seen and repaired
   * (src/kafka/outcome.ts). Absent in prepare results of older versions: the marker alone decides.
   */
  written?: WrittenParts;
}

/** Per topic, [partition, first offset] pairs: where a transaction wrote (handles, not records). */
export type WrittenParts = Record<string, [number, number][]>;

/**
 * A transaction Kafka split: after an ambiguous EndTxn, committed on some of the partitions it
 * wrote and aborted on others ('topic[partition]'). The aborted parts are redone, the committed
 * ones never written again.
 */
export interface KafkaSplit {
  producerId: number;
  producerEpoch: number;
  committed: string[];
  aborted: string[];
}

export interface PreparedEpoch {
  kind: 'prepared';
  epoch: number;
  start: number;
  end: number;
  records: number;
  deadLetters: number;
  kafka: KafkaHandle;
  /** 'gtrid#bqual' of the prepared XA branch. */
  xid: string;
}

export type PrepareResult = PreparedEpoch | { kind: 'empty'; offset: number };

/**
 * Where a partition workflow reads and writes, for pipelines started since several source
 * topics and partition discovery (src/workflows/pipeline.ts). `partition` in the args of a
 * partition workflow and its activities is the pipeline's *source partition id*: the key of
 * workflow ids, transactional ids, XA gtrids, ledger rows and the progress partition. For a
 * single-topic pipeline the id equals the topic partition. Absent in runs started before:
 * those read spec.source.topic[partition] and write outputs to the record's partition.
 */
export interface SourceRef {
  topic: string;
  /** The partition of `topic`. */
  partition: number;
  /** Partition counts of the sink and dead-letter topics when the partition workflow started: the default output partition is id mod this (fixed, so a redo writes where the prepare wrote). */
  outputPartitions: number;
  deadLetterPartitions: number;
  /** Overrides spec.source.startFrom (a partition discovered after the pipeline started is read from its start). */
  startFrom?: 'earliest' | 'latest';
}

export interface EpochArgs {
  spec: PipelineSpec;
  partition: number;
  source?: SourceRef;
  epoch: number;
  offset: number;
  /** Return at once when no data is available (drain). */
  noWait?: boolean;
}

export interface CommitArgs {
  spec: PipelineSpec;
  partition: number;
  source?: SourceRef;
  prepared: PreparedEpoch;
}

export type KafkaCommitOutcome = 'committed' | 'aborted';

/** Why an epoch's Kafka side is redone, as the status query and the Web UI show it. */
export function redoReason(what: string, split: KafkaSplit | undefined): string {
  return split
    ? `${what}: Kafka split the transaction (producer ${split.producerId} epoch ${split.producerEpoch}: committed on ${split.committed.join(', ')}, aborted on ${split.aborted.join(', ')}); only the aborted parts are redone`
    : `${what}: Kafka aborted the prepared transaction (transaction timeout or fenced); redone`;
}
export type MysqlCommitOutcome = 'committed' | 'redone';

/** advanceEpoch (the legacy loop's; an adapter over advanceMembers): commit `prepared` (epoch e) and prepare e+1 from its end. */
export interface AdvanceArgs extends CommitArgs {
  /** Prepare e+1 without waiting for data (drain). */
  noWait?: boolean;
}

/**
 * e's commit outcomes, and e+1's prepare result. `next` is absent when e's Kafka side was
 * aborted by the broker: e+1 was withdrawn inside the activity (e is redone first).
 */
export interface AdvanceResult {
  kafka: KafkaCommitOutcome;
  mysql: MysqlCommitOutcome;
  /** Present when the Kafka side came out split (then kafka is 'aborted': the aborted parts are redone). */
  split?: KafkaSplit;
  next?: PrepareResult;
}

export interface ReconcileArgs {
  spec: PipelineSpec;
  partition: number;
  source?: SourceRef;
  /** The workflow's own view (after continue-as-new); absent on a fresh start. */
  expected?: { epoch: number; offset: number };
}

export interface ReconcileResult {
  epoch: number;
  offset: number;
  rolledBack: string[];
  /** Committed epochs whose staged rows reconcile applied (their commit was cut off). */
  applied?: number[];
  /** What recovery did (src/recovery.ts), one line per action; absent when nothing was in doubt. */
  recovered?: string[];
}

/** Phases of the workflow that runs an epoch loop (a partition's or a group's); `phase` is also a search attribute. */
export type Phase = 'reconciling' | 'preparing' | 'committing' | 'redoing' | 'paused' | 'done' | 'stopped';

export const TRANSITIONS: Record<Phase, readonly Phase[]> = {
  reconciling: ['preparing', 'paused'],
  preparing: ['committing', 'preparing', 'paused', 'done', 'stopped'],
  committing: ['redoing', 'preparing', 'paused', 'done', 'stopped'],
  redoing: ['preparing', 'paused', 'done', 'stopped'],
  paused: ['preparing', 'stopped', 'done'],
  done: [],
  stopped: [],
};

export function assertTransition(from: Phase, to: Phase): void {
  if (!TRANSITIONS[from].includes(to)) throw new Error(`invalid phase transition ${from} → ${to}`);
}

export interface PartitionState {
  epoch: number;
  offset: number;
  committedEpochs: number;
  records: number;
  deadLetters: number;
  redos: number;
  mysqlRedos: number;
}

/** A partition's state once its epoch (ending at `end`, with these counts) committed. */
export function afterEpoch(
  s: PartitionState,
  e: { end: number; records: number; deadLetters: number },
): PartitionState {
  return {
    ...s,
    epoch: s.epoch + 1,
    offset: e.end,
    committedEpochs: s.committedEpochs + 1,
    records: s.records + e.records,
    deadLetters: s.deadLetters + e.deadLetters,
  };
}

export type ControlAction = 'pause' | 'resume' | 'drain' | 'stop';

export interface Control {
  paused: boolean;
  /** Finish once caught up with the source. */
  drain: boolean;
  /** Finish at the next epoch boundary. */
  stop: boolean;
}

export interface PartitionInput {
  spec: PipelineSpec;
  partition: number;
  /** Set by pipelines started since source discovery: the child then also reports its end to the pipeline workflow. */
  source?: SourceRef;
  /** Carried across continue-as-new. */
  state?: PartitionState;
  control?: Control;
}

export interface PartitionStatus {
  pipeline: string;
  partition: number;
  phase: Phase;
  state: PartitionState;
  control: Control;
  lastError?: string;
  runEpochs: number;
  /** Epochs in flight and where each participant stands (src/protocol/epoch.ts); absent in runs of older versions. */
  inFlight?: { epoch: number; kafka: string; mysql: string; step: string }[];
  /** Workflow time (ms) of the last completed epoch of this run. */
  lastCommitAt?: number;
}

export function applyControl(c: Control, action: ControlAction): Control {
  switch (action) {
    case 'pause':
      return { ...c, paused: true };
    case 'resume':
      return { ...c, paused: false };
    case 'drain':
      return { ...c, drain: true, paused: false };
    case 'stop':
      return { ...c, stop: true };
  }
}

export function validateControl(action: unknown, c: Control): void {
  if (action !== 'pause' && action !== 'resume' && action !== 'drain' && action !== 'stop') {
    throw new Error(`unknown control action ${JSON.stringify(action)}; expected pause, resume, drain or stop`);
  }
  if (c.stop || c.drain) {
    if (action === 'pause' || action === 'resume')
      throw new Error(`pipeline is already ${c.stop ? 'stopping' : 'draining'}; '${action}' no longer applies`);
  }
  if (action === 'resume' && !c.paused) throw new Error('pipeline is not paused');
  if (action === 'pause' && c.paused) throw new Error('pipeline is already paused');
}
export * from './group';
