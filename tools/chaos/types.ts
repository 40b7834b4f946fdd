/** The shapes of a fault campaign (tools/chaos/campaign.ts): its options, each fault's record, the per-kind summary, soak samples and the result. */
import type { Check, VerifyReport } from '../../src/verify';
import type { auditRecords, JavaReadResult, RangeStats } from './audit';
import type { LandedInput } from './feeder';
import type { FaultKind, PlannedFault } from './schedule';

export interface CampaignOptions {
  seed: number;
  /** Input records at least (more if the faults outlast the steady stream). */
  records: number;
  partitions: number;
  /**
   * spec.parallelism of the campaign's pipeline: partition groups (source partition p in group
   * p mod parallelism, one Kafka transaction and one XA branch per group epoch). Absent: one
   * workflow per partition.
   */
  parallelism?: number;
  workers: number;
  /** Records per second of the live input stream while faults run. */
  ratePerSecond: number;
  mode: 'every-step' | 'cover' | 'soak' | 'cluster';
  randomEach: number;
  /** Kafka nodes of the stack (3: the cluster campaign, run without the Kafka proxies). */
  kafkaNodes?: number;
  /** Dedicated KRaft controllers beside the Kafka nodes (3), or none (combined nodes). */
  kafkaControllers?: number;
  /** soak mode: how many faults, and the quiet time before each. */
  soakFaults?: number;
  soakSpacingMs?: [number, number];
  /** Input values prepared, as a multiple of `records` (the stream may outlast the minimum). */
  inputMultiplier?: number;
  /** Samples of worker memory, event-loop delay, history and table sizes this often (soak). */
  sampleEveryMs?: number;
  txnTimeouts: number;
  /** Transactions split at their commit, alternately the markers and the outputs committed (kafka-split). */
  splits?: number;
  transactionTimeoutMs: number;
  maxRecords: number;
  /** The compare sink throws mid-batch on the first attempt of every n-th epoch… */
  compareFailEveryNthEpoch: number;
  /** …once more than this many records of the epoch were written. */
  compareFailAfter: number;
  poisonEvery: number;
  portBase: number;
  runDir: string;
  /** Give up on a fault (stuck) after this long. */
  recoveryTimeoutMs: number;
  /**
   * The recovery bound: every affected partition must commit an epoch prepared after the fault
   * within this long after the fault ended (a restart returned, a freeze or cut was lifted).
   */
  recoveryBoundMs: number;
  /** How the campaign was started (written to the report so it can be replayed). */
  command: string;
  /** Code revision the campaign ran (git), for the report. */
  revision?: string;
  /** Kafka version and node layout the campaign's stack ran (ONCEFLOW_KAFKA_VERSION, ONCEFLOW_KAFKA_CONTROLLERS), for the report. */
  kafkaVersion?: string;
  kafkaLayout?: string;
  log: (line: string) => void;
}

export interface FaultRecord extends PlannedFault {
  injected: boolean;
  at?: string;
  /** Epoch the protocol-step trigger fired at (a group epoch when `group` is set). */
  epoch?: number;
  /** Grouped pipeline: the group whose epoch the trigger fired at (the group of `partition`). */
  group?: number;
  hitWorker?: number;
  recoveryMs?: number;
  /** From injection until the fault ended (a restart returned, a freeze or cut was lifted). */
  faultMs?: number;
  affected: { partition: number; afterEpoch: number; throughEpoch: number }[];
  /** XA branches of already committed epochs still prepared after recovery. */
  danglingAfter: number;
  /** decided branches XA RECOVER still listed after the recovery while their XA COMMIT was in flight (not counted as dangling) */
  committingAfter?: number;
  stats?: RangeStats;
  note: string;
  /** Cluster kinds: the node killed and why it was the target. */
  node?: number;
  target?: string;
  /** Cluster kinds: from the node's return until every node was in every ISR again. */
  wholeAgainMs?: number;
}

export interface KindSummary {
  kind: FaultKind;
  injected: number;
  atSteps: string;
  records: number;
  duplicates: number;
  missing: number;
  dangling: number;
  longestRecoveryMs: number | null;
  /** Longest time from the end of a fault of this kind until every affected partition progressed. */
  longestAfterEndMs: number | null;
}

/** One soak sample: what a long run must keep bounded. */
export interface Sample {
  atS: number;
  produced: number;
  committedRecords: number;
  workerRssMb: (number | null)[];
  loopDelayP99Ms: (number | null)[];
  historyEvents: number[];
  historyBytes: number[];
  ledgerRows: number;
  stagedRows: number;
  tableBytes: number;
  progressTopicRecords: number;
}

export interface CampaignResult {
  options: Omit<CampaignOptions, 'log'>;
  pipeline: string;
  workflowId: string;
  startedAt: string;
  durationMs: number;
  produced: number;
  faults: FaultRecord[];
  kinds: KindSummary[];
  evidence: {
    workerSigkills: number;
    workerRestarts: number;
    sinkThrows: number;
    redosKafka: number;
    /** Epochs whose Kafka transaction came out split (committed on some partitions, aborted on others), each repaired by a redo of the aborted parts. */
    kafkaSplits?: number;
    redosMysql: number;
    rolledBackBranches: number;
    txnTimeoutPrecursors: number;
    proxyResets: number;
    /** proxyResets by the service cut off (absent in results of older versions). */
    proxyResetsBy?: { kafka: number; mysql: number };
    inputSendRetries: number;
    /** prepare attempts failed by src/kafka/landed.ts (an acknowledgement without a partition it carried, or records short in the log). */
    landedCheckFailures?: number;
  };
  verify: VerifyReport;
  /** What the input producer had acknowledged against what the source topic holds. */
  input?: LandedInput;
  audit: Awaited<ReturnType<typeof auditRecords>>['totals'];
  javaRead?: JavaReadResult;
  samples: Sample[];
  /** Set when the checks were computed again from a saved result (--from) by this code revision. */
  judgedBy?: string;
  checks: Check[];
  ok: boolean;
}
