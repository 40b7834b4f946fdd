/** The shapes of a verification report (src/verify/index.ts). */
/** One source partition (by its source partition id; src/mysql/sources.ts). */
export interface PartitionReport extends OutputCounts {
  partition: number;
  topic: string;
  topicPartition: number;
  sourceEnd: number;
  committedThrough: number | null;
  ledgerEpoch: number | null;
  markerEpoch: number | null;
  /** Outputs the transform gives for the committed records, in whichever output partitions they go to. */
  expectedOutputs: number;
  deadLetters: number;
  expectedDeadLetters: number;
}

/**
 * Output counts. Of a source partition (PartitionReport): `outputs` = its expected outputs found
 * in read_committed, `uncommittedOutputs` = read_uncommitted records of the output partitions it
 * writes to (shared with other source partitions writing there), duplicates and unexpected
 * records 0 (they are counted per output partition), `inOrder` = in source order in each output
 * partition. Of an output partition (OutputReport): as multisets, order per source partition.
 */
interface OutputCounts {
  outputs: number;
  uncommittedOutputs: number;
  duplicates: number;
  missing: number;
  unexpected: number;
  inOrder: boolean;
}

/** One partition of the output topic: expected vs read_committed records, as multisets. */
export interface OutputReport extends OutputCounts {
  partition: number;
  /** Source partition ids whose outputs are expected here. */
  sources: number[];
  expected: number;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** The run's dead letters (read_committed) by reason class, against the budget for the records committed. */
export interface DeadLetterSummary {
  total: number;
  /** Reason class (header onceflow.reason; older dead letters: the text of onceflow.error before its first ':') → count. */
  byReason: Record<string, number>;
  /** Dead letters the budget allows for the run's source records (src/activities/budget.ts). */
  allowed: number;
  maxRatio: number;
}

export interface VerifyReport {
  pipeline: string;
  ok: boolean;
  checks: Check[];
  deadLetters: DeadLetterSummary;
  partitions: PartitionReport[];
  outputs: OutputReport[];
  totals: {
    sourceRecords: number;
    outputs: number;
    uncommittedOutputs: number;
    abortedCopies: number;
    duplicates: number;
    /** Missing plus unexpected records (outputs and dead letters), as the 'nothing missing' check counts them. */
    missing: number;
    deadLetters: number;
    preparedXaBranches: number;
    hangingPartitions: number;
  };
}

/** A source partition of a pipeline: its id, topic and partition (see pipelineSources). */
export interface PipelineSourcePartition {
  id: number;
  topic: string;
  partition: number;
}
