import type { KafkaSplit } from '../protocol';

/** What activities report to an observer (the worker's metrics, the benchmark, the fault campaign). */

/**
 * Where a prepare spent its time (ms): waiting for and reading the source, waiting for
 * InitProducerId after the transform (it is asked before the transform and runs beside it),
 * the transform, Kafka produce (incl. marker and sendOffsets), MySQL writes (incl. the ledger
 * row), and XA END + XA PREPARE + detaching the session. For the benchmark's per-epoch split.
 */
export interface PrepareSplit {
  readMs: number;
  initMs: number;
  transformMs: number;
  kafkaMs: number;
  /** pipelined epochs: waiting until the previous epoch's MySQL side committed (its row locks are gone) */
  previousCommitWaitMs: number;
  mysqlMs: number;
  xaPrepareMs: number;
}

export type ObservedEvent =
  | {
      kind: 'prepared';
      pipeline: string;
      partition: number;
      epoch: number;
      records: number;
      deadLetters: number;
      ms: number;
      end: number;
      /** source records not yet in an epoch (LSO − end) */ lag: number;
      /** Date.now() when the activity started */ startedAt: number;
      split: PrepareSplit;
      /** The partition group whose epoch this member's part was (spec.parallelism); absent when ungrouped. */
      group?: number;
    }
  | {
      kind: 'committed';
      pipeline: string;
      partition: number;
      epoch: number;
      side: 'kafka' | 'mysql';
      ms: number;
      startedAt: number;
      /** MySQL side: the part of `ms` spent applying the staged rows after XA COMMIT */
      applyMs?: number;
      /** Committed by the worker that prepared it, as soon as the decision was in history, outside any activity (src/activities/decided.ts). */
      early?: true;
    }
  | { kind: 'redo'; pipeline: string; partition: number; side: 'kafka' | 'mysql' }
  /** An epoch's Kafka transaction came out committed on some partitions and aborted on others (src/kafka/outcome.ts). */
  | { kind: 'split'; pipeline: string; partition: number; epoch: number; split: KafkaSplit }
  | { kind: 'retry'; pipeline: string; partition: number; activity: string }
  /** An epoch refused: over the dead-letter budget, or a row for a table the pipeline does not declare (src/activities/budget.ts). */
  | {
      kind: 'halted';
      pipeline: string;
      partition: number;
      epoch: number;
      cause: 'dead-letter-budget' | 'undeclared-table';
    }
  | { kind: 'rolled-back'; pipeline: string; partition: number; epoch: number; xid: string };
