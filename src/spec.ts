/**
 * The pipeline definition: plain data that travels through workflow history (it holds no
 * records and no credentials). Its fields, rules and defaults are written once, as the schema
 * in src/schema/pipeline.ts (definePipeline); the types here are inferred from it.
 *
 * The transform itself is code registered on the workers under `transform` (see
 * src/transforms/registry.ts), like a Kafka Streams topology or a Flink job jar.
 *
 * Pure module: workflows import it (the schema only as types, so their bundle holds no zod).
 */
import type { z } from 'zod';
import type { pipelineSchema } from './schema/pipeline';

/** The definition with its defaults filled, as definePipeline (src/schema/pipeline.ts) returns it. */
type Defined = z.output<typeof pipelineSchema>;
type Optional<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;

/**
 * A pipeline as it travels through workflow history: the fields of src/schema/pipeline.ts with
 * their defaults filled. `source.topic` is the first source topic (read every one with
 * `sourceTopics(spec)`); `source.topics` is there only when the definition gave `topics` (a list, of one or more).
 * Runs started by older versions lack a few fields, so they stay optional here:
 * `source.discoveryIntervalMs` (no partition discovery then), `mysqlSink.mode` (direct writes)
 * and `deadLetter` (SPEC_DEFAULTS.deadLetter applies).
 */
export type PipelineSpec = Omit<Defined, 'source' | 'mysqlSink' | 'deadLetter'> & {
  source: Optional<Defined['source'], 'discoveryIntervalMs'>;
  mysqlSink: Optional<Defined['mysqlSink'], 'mode'>;
  deadLetter?: Defined['deadLetter'];
};
/** A pipeline definition as written: every field with a default may be left out. */
export type PipelineInput = z.input<typeof pipelineSchema>;
/** A MySQL table the transform writes, and how its rows combine (src/mysql/table-mode.ts). */
export type TableSpec = Defined['mysqlSink']['tables'][number];
type OnDuplicate = TableSpec['onDuplicate'];
export type Accumulate = Extract<OnDuplicate, { kind: 'accumulate' }>;
export type Replace = Extract<OnDuplicate, { kind: 'replace' }>;
/** Newest wins: `columns` and `version` take the incoming values only if its `version` is greater (src/mysql/table-mode.ts). */
export type Newest = Extract<OnDuplicate, { kind: 'newest' }>;
export type Ignore = Extract<OnDuplicate, { kind: 'ignore' }>;
/** Most source records and bytes per epoch, and the longest wait for data before one closes. */
export type EpochBounds = Defined['epoch'];
/**
 * How many of an epoch's records may go to the dead-letter topic before the epoch is refused
 * (src/activities/budget.ts, docs/design.md §1.1). An epoch of n records may dead-letter
 * min(maxPerEpoch, max(1, ⌊maxRatio·n⌋)) of them: one bad record always passes (unless
 * maxPerEpoch is 0: none may), a transform that fails on every record of an epoch of two or more
 * halts the partition there. `verify` judges the whole run by the ratio alone.
 */
export type DeadLetterBudget = Defined['deadLetter'];

/**
 * Fields a pipeline definition may no longer set, each with the reason and what to do; a
 * definition that still sets one is refused with this text (also from a config file).
 */
export const REMOVED_SETTINGS: Readonly<Record<string, string>> = {
  'epoch.commitWithNextPrepare':
    'was removed: it was a benchmark knob that kept the two-activity epoch loop alive; every new run commits epoch e and prepares e+1 in one activity. Delete the field',
};

export const SPEC_DEFAULTS = {
  startFrom: 'earliest' as const,
  transactionTimeoutMs: 300_000,
  transactionalIdPool: 2,
  epoch: { maxRecords: 5_000, maxBytes: 4 * 1024 * 1024, maxWaitMs: 1_000 },
  epochsPerRun: 500,
  /** 1% of an epoch, at least one record, at most 100: why in docs/design.md §1.1. */
  deadLetter: { maxRatio: 0.01, maxPerEpoch: 100 },
  /** Like Flink's partition.discovery.interval.ms default of 30 s. */
  discoveryIntervalMs: 30_000,
};

/** Bounds of source.discoveryIntervalMs: often enough to matter, rarely enough to cost nothing. */
export const DISCOVERY_INTERVAL_BOUNDS = { min: 1_000, max: 3_600_000 };

/** MySQL identifiers onceflow accepts: plain names only, so quoting can never be escaped. */
export const IDENTIFIER_RE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/**
 * A column's definition in `create.columns`, which goes into CREATE TABLE as text: words and
 * numbers separated by spaces, a word followed at most by `(n)` or `(n, m)` — 'BIGINT UNSIGNED
 * NOT NULL', 'DECIMAL(12, 2)', 'DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3)', 'INT DEFAULT -1'. No
 * quote, comment, list separator or bracket of its own: it can only describe its own column.
 */
export const COLUMN_TYPE_RE =
  /^[A-Za-z][A-Za-z0-9_]*(?: ?\( ?\d{1,5} ?(?:, ?\d{1,5} ?)?\))?(?: +(?:[A-Za-z][A-Za-z0-9_]*(?: ?\( ?\d{1,5} ?(?:, ?\d{1,5} ?)?\))?|-?\d{1,20}(?:\.\d{1,20})?))*$/;

/** Every source topic of a pipeline, in definition order. */
export const sourceTopics = (spec: PipelineSpec): string[] => spec.source.topics ?? [spec.source.topic];

/** Workflow id of a pipeline's parent workflow and of one partition's workflow. */
export const pipelineWorkflowId = (pipeline: string) => `onceflow/${pipeline}`;
export const partitionWorkflowId = (pipeline: string, partition: number) => `onceflow/${pipeline}/${partition}`;
export const consumerGroupId = (pipeline: string) => `onceflow.${pipeline}`;
export const transactionalId = (pipeline: string, partition: number, slot: number) =>
  `onceflow.${pipeline}.${partition}.${slot}`;

/** Most partition groups of a pipeline. */
export const MAX_PARALLELISM = 1024;
/** The group of source partition id `id` (pipelines with spec.parallelism). */
export const groupOf = (spec: PipelineSpec, id: number) => id % spec.parallelism!;
export const groupWorkflowId = (pipeline: string, group: number) => `onceflow/${pipeline}/group-${group}`;
/** The workflow that runs source partition id `id`: its group's, or its own. */
export const runnerWorkflowId = (spec: PipelineSpec, id: number) =>
  spec.parallelism ? groupWorkflowId(spec.name, groupOf(spec, id)) : partitionWorkflowId(spec.name, id);
/** A group's transactional ids ('g' keeps them apart from the partitions' own, which redos and older runs use). */
export const groupTransactionalId = (pipeline: string, group: number, slot: number) =>
  `onceflow.${pipeline}.g${group}.${slot}`;
/** The group and slot of one of `pipeline`'s group transactional ids; undefined for any other id. */
export function parseGroupTransactionalId(pipeline: string, id: string): { group: number; slot: number } | undefined {
  const prefix = `onceflow.${pipeline}.g`;
  const m = id.startsWith(prefix) ? /^(\d+)\.(\d+)$/.exec(id.slice(prefix.length)) : null;
  if (!m) return undefined;
  const [group, slot] = [Number(m[1]), Number(m[2])];
  return groupTransactionalId(pipeline, group, slot) === id ? { group, slot } : undefined;
}
