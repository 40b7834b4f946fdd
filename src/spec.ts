/**
 * The pipeline definition: plain data that travels through workflow history (it holds no
 * records and no credentials), validated with errors that name the field and the fix.
 *
 * The transform itself is code registered on the workers under `transform` (see
 * src/transforms/registry.ts), like a Kafka Streams topology or a Flink job jar.
 *
 * Pure module: workflows import it.
 */
import { ValidationError } from './errors';

export type Accumulate = { kind: 'accumulate'; columns: string[] };
export type Replace = { kind: 'replace'; columns: string[] };
/** Newest wins: `columns` and `version` take the incoming values only if its `version` is greater (src/mysql/table-mode.ts). */
export type Newest = { kind: 'newest'; version: string; columns?: string[] };
export type Ignore = { kind: 'ignore' };

export interface TableSpec {
  /** Table name; created if missing when `create` is given. */
  name: string;
  /** Columns written by the transform's row operations, in statement order. */
  columns: string[];
  /**
   * How a row combines with the one already under its key: 'accumulate' adds up `columns`;
   * 'replace' overwrites them (last write wins: with several source partitions, whichever
   * committed last); 'newest' overwrites them and `version` only with a greater version;
   * 'ignore' keeps the first row (insert-only). See src/mysql/table-mode.ts.
   */
  onDuplicate: Accumulate | Replace | Newest | Ignore;
  /** Optional DDL column definitions for `CREATE TABLE IF NOT EXISTS`, e.g. {"indicate": "BIGINT NOT NULL"}. */
  create?: { columns: Record<string, string>; primaryKey: string[] };
}

export interface EpochBounds {
  /** Most source records per epoch. */
  maxRecords: number;
  /** Most source bytes per epoch (keys + values). */
  maxBytes: number;
  /** Longest wait for data before an epoch closes (or, empty, before the workflow polls again). */
  maxWaitMs: number;
}

/**
 * Fields a pipeline definition may no longer set, each with the reason and what to do; a
 * definition that still sets one is refused with this text (also from a config file).
 */
export const REMOVED_SETTINGS: Readonly<Record<string, string>> = {
  'epoch.commitWithNextPrepare':
    'was removed: it was a benchmark knob that kept the two-activity epoch loop alive; every new run commits epoch e and prepares e+1 in one activity. Delete the field',
};

/**
 * How many of an epoch's records may go to the dead-letter topic before the epoch is refused
 * (src/activities/budget.ts, docs/design.md §1.1). An epoch of n records may dead-letter
 * min(maxPerEpoch, max(1, ⌊maxRatio·n⌋)) of them: one bad record always passes (unless
 * maxPerEpoch is 0: none may), a transform that fails on every record of an epoch of two or more
 * halts the partition there. `verify` judges the whole run by the ratio alone.
 */
export interface DeadLetterBudget {
  /** Share of an epoch's records (0 to 1) that may be dead-lettered beyond the first one. */
  maxRatio: number;
  /** Most dead letters in one epoch, whatever its size; 0: any dead letter halts the partition. */
  maxPerEpoch: number;
}

export interface PipelineSpec {
  /** [a-z0-9][a-z0-9._-]{0,39}; names workflows, transactional ids, xids and the consumer group. */
  name: string;
  /**
   * `topic`: the source topic; with several (`topics`), the first of them — read every topic
   * with `sourceTopics(spec)`. `topics` is present only when the definition listed several.
   * `discoveryIntervalMs`: how often the pipeline looks for partitions added to its topics
   * (absent in runs started before discovery).
   */
  source: { topic: string; topics?: string[]; startFrom: 'earliest' | 'latest'; discoveryIntervalMs?: number };
  /** Name of a transform registered on the workers. */
  transform: string;
  /** Free-form, JSON-serialisable options handed to the transform (no secrets). */
  transformOptions?: Record<string, unknown>;
  kafkaSink: {
    topic: string;
    /** Kafka transaction timeout; must exceed the longest prepare→commit gap. The redo path makes a short one safe. */
    transactionTimeoutMs: number;
    /** Transactional ids per partition used in rotation (≥ 2), so a stale commit can never hit a newer transaction. */
    transactionalIdPool: number;
  };
  /**
   * `mode`: 'staged' (default) — the XA branch writes the epoch's rows to staging tables and the
   * commit applies them to the targets in a short local transaction, so a prepared branch never
   * locks target rows; 'direct' — the branch writes the targets, which then change exactly at
   * XA COMMIT, but partitions writing the same keys wait for each other's commits (src/mysql/stage.ts).
   */
  mysqlSink: { tables: TableSpec[]; mode?: 'staged' | 'direct' };
  /** Topic that receives records the transform rejected, with reason and source coordinates. */
  deadLetterTopic: string;
  /** Topic holding one progress marker per committed epoch and source partition. */
  progressTopic: string;
  /** The dead-letter budget; absent in runs started before it existed (SPEC_DEFAULTS.deadLetter then applies). */
  deadLetter?: DeadLetterBudget;
  epoch: EpochBounds;
  /** Continue-as-new after this many epochs (also when Temporal suggests it). */
  epochsPerRun: number;
  /**
   * Partition groups: this many workflows run the pipeline, source partition id p in group
   * p mod parallelism, and each epoch of a group is one Kafka transaction and one XA branch for
   * all the partitions of the group (src/protocol/group.ts), like Flink's parallelism or Kafka
   * Streams' threads. Absent: one workflow, transaction and branch per source partition.
   */
  parallelism?: number;
}

export type PipelineInput = Omit<
  PipelineSpec,
  'source' | 'kafkaSink' | 'deadLetterTopic' | 'progressTopic' | 'deadLetter' | 'epoch' | 'epochsPerRun'
> & {
  /** Exactly one of `topic` and `topics`. */
  source: { topic?: string; topics?: string[]; startFrom?: 'earliest' | 'latest'; discoveryIntervalMs?: number };
  kafkaSink: { topic: string; transactionTimeoutMs?: number; transactionalIdPool?: number };
  deadLetterTopic?: string;
  progressTopic?: string;
  deadLetter?: Partial<DeadLetterBudget>;
  epoch?: Partial<EpochBounds>;
  epochsPerRun?: number;
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

const ON_DUPLICATE_KINDS = ['accumulate', 'replace', 'newest', 'ignore'];
const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,39}$/;
const TOPIC_RE = /^[a-zA-Z0-9._-]{1,249}$/;
/** MySQL identifiers onceflow accepts: plain names only, so quoting can never be escaped. */
export const IDENTIFIER_RE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const SQL_TYPE_RE = /^[A-Za-z][A-Za-z0-9_ (),]*$/;

function positiveInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

/** Fills defaults and validates; throws ValidationError naming every wrong field. */
export function definePipeline(input: PipelineInput): PipelineSpec {
  const problems: { field: string; problem: string }[] = [];
  const bad = (field: string, problem: string) => problems.push({ field, problem });
  const i = (input ?? {}) as Partial<PipelineInput>;

  if (typeof i.name !== 'string' || !NAME_RE.test(i.name)) {
    bad('name', `must match ${NAME_RE} (lower-case letters, digits, '.', '_', '-'; at most 40), got ${JSON.stringify(i.name)}`);
  }
  const topic = (field: string, v: unknown) => {
    if (typeof v !== 'string' || !TOPIC_RE.test(v)) bad(field, `must be a Kafka topic name (letters, digits, '.', '_', '-'), got ${JSON.stringify(v)}`);
  };
  const src = i.source as PipelineInput['source'] | undefined;
  let topics: string[] = [];
  if (src?.topic !== undefined && src?.topics !== undefined) bad('source', "give either 'topic' or 'topics', not both");
  else if (src?.topics !== undefined) {
    if (!Array.isArray(src.topics) || src.topics.length === 0) bad('source.topics', `must be a non-empty list of topic names, got ${JSON.stringify(src.topics)}`);
    else {
      src.topics.forEach((t, k) => topic(`source.topics[${k}]`, t));
      src.topics.forEach((t, k) => {
        if (src.topics!.indexOf(t) !== k) bad(`source.topics[${k}]`, `'${t}' is listed twice`);
      });
      topics = src.topics;
    }
  } else {
    topic('source.topic', src?.topic);
    if (typeof src?.topic === 'string') topics = [src.topic];
  }
  const discoveryIntervalMs = src?.discoveryIntervalMs ?? SPEC_DEFAULTS.discoveryIntervalMs;
  const { min, max } = DISCOVERY_INTERVAL_BOUNDS;
  if (!positiveInt(discoveryIntervalMs) || discoveryIntervalMs < min || discoveryIntervalMs > max) {
    bad('source.discoveryIntervalMs', `must be an integer from ${min} to ${max} ms (how often new partitions are looked for), got ${JSON.stringify(discoveryIntervalMs)}`);
  }
  const startFrom = i.source?.startFrom ?? SPEC_DEFAULTS.startFrom;
  if (startFrom !== 'earliest' && startFrom !== 'latest') bad('source.startFrom', `must be 'earliest' or 'latest', got ${JSON.stringify(startFrom)}`);
  if (typeof i.transform !== 'string' || i.transform.length === 0) bad('transform', 'must name a transform registered on the workers');
  if (i.transformOptions !== undefined && (typeof i.transformOptions !== 'object' || i.transformOptions === null)) {
    bad('transformOptions', 'must be an object');
  }
  topic('kafkaSink.topic', i.kafkaSink?.topic);
  if (i.kafkaSink?.topic !== undefined && topics.includes(i.kafkaSink.topic)) {
    bad('kafkaSink.topic', `must differ from ${src?.topics ? 'every one of source.topics' : 'source.topic'} (a pipeline reading its own output never ends)`);
  }
  const txTimeout = i.kafkaSink?.transactionTimeoutMs ?? SPEC_DEFAULTS.transactionTimeoutMs;
  if (!positiveInt(txTimeout) || txTimeout < 1000) bad('kafkaSink.transactionTimeoutMs', `must be an integer ≥ 1000 ms, got ${JSON.stringify(txTimeout)}`);
  const pool = i.kafkaSink?.transactionalIdPool ?? SPEC_DEFAULTS.transactionalIdPool;
  if (!positiveInt(pool) || pool < 2 || pool > 16) bad('kafkaSink.transactionalIdPool', `must be an integer from 2 to 16, got ${JSON.stringify(pool)}`);

  const mysqlMode = i.mysqlSink?.mode ?? 'staged';
  if (mysqlMode !== 'staged' && mysqlMode !== 'direct') bad('mysqlSink.mode', `must be 'staged' or 'direct', got ${JSON.stringify(mysqlMode)}`);
  const tables = i.mysqlSink?.tables;
  if (!Array.isArray(tables)) bad('mysqlSink.tables', 'must be an array of table definitions (may be empty)');
  else {
    const seen = new Set<string>();
    tables.forEach((t, n) => {
      const f = `mysqlSink.tables[${n}]`;
      if (!t || typeof t.name !== 'string' || !IDENTIFIER_RE.test(t.name)) {
        bad(`${f}.name`, `must match ${IDENTIFIER_RE}, got ${JSON.stringify(t?.name)}`);
      } else if (seen.has(t.name)) bad(`${f}.name`, `'${t.name}' is defined twice`);
      else seen.add(t.name);
      if (!Array.isArray(t?.columns) || t.columns.length === 0) bad(`${f}.columns`, 'must list at least one column');
      else t.columns.forEach((c, k) => {
        if (typeof c !== 'string' || !IDENTIFIER_RE.test(c)) bad(`${f}.columns[${k}]`, `must match ${IDENTIFIER_RE}, got ${JSON.stringify(c)}`);
        else if (c.toLowerCase().startsWith('onceflow_')) bad(`${f}.columns[${k}]`, `'${c}': the prefix 'onceflow_' is reserved for onceflow's staging columns; rename the column`);
      });
      const od = t?.onDuplicate as { kind?: string; columns?: unknown; version?: unknown } | undefined;
      const isColumn = (c: unknown) => typeof c === 'string' && Array.isArray(t?.columns) && t.columns.includes(c);
      if (!od || !ON_DUPLICATE_KINDS.includes(od.kind ?? '')) {
        bad(`${f}.onDuplicate.kind`, `must be 'accumulate' (add up), 'replace' (last write wins), 'newest' (the greater version wins) or 'ignore' (first write wins), got ${JSON.stringify(od?.kind)}`);
      } else if (od.kind !== 'ignore') {
        const newest = od.kind === 'newest';
        // 'newest' without columns keeps only the version up to date: a running maximum.
        if (!(newest && od.columns === undefined)) {
          if (!Array.isArray(od.columns) || (od.columns.length === 0 && !newest)) bad(`${f}.onDuplicate.columns`, `must list the columns to ${od.kind}`);
          else od.columns.forEach((c: unknown, k) => {
            if (!isColumn(c)) bad(`${f}.onDuplicate.columns[${k}]`, `'${String(c)}' is not one of the table's columns`);
          });
        }
        if (newest) {
          if (typeof od.version !== 'string' || !IDENTIFIER_RE.test(od.version)) bad(`${f}.onDuplicate.version`, `must name the version column (${IDENTIFIER_RE}), e.g. an event time; got ${JSON.stringify(od.version)}`);
          else if (!isColumn(od.version)) bad(`${f}.onDuplicate.version`, `'${od.version}' is not one of the table's columns (${Array.isArray(t?.columns) ? t.columns.join(', ') : 'none'})`);
          else if (t.create?.primaryKey?.includes(od.version)) bad(`${f}.onDuplicate.version`, `'${od.version}' is in create.primaryKey: a version in the key makes every version a row of its own; take it out of the key`);
        }
      }
      if (od && od.kind !== 'newest' && od.version !== undefined) bad(`${f}.onDuplicate.version`, "is only for kind 'newest'");
      if (t?.create) {
        const cols = t.create.columns ?? {};
        for (const [c, ty] of Object.entries(cols)) {
          if (!IDENTIFIER_RE.test(c)) bad(`${f}.create.columns.${c}`, `column name must match ${IDENTIFIER_RE}`);
          if (typeof ty !== 'string' || !SQL_TYPE_RE.test(ty)) bad(`${f}.create.columns.${c}`, `must be a plain SQL type such as 'BIGINT NOT NULL', got ${JSON.stringify(ty)}`);
        }
        if (!Array.isArray(t.create.primaryKey) || t.create.primaryKey.length === 0) bad(`${f}.create.primaryKey`, 'must list the key columns');
        else t.create.primaryKey.forEach((c, k) => {
          if (!(c in cols)) bad(`${f}.create.primaryKey[${k}]`, `'${c}' is not in create.columns`);
        });
      }
    });
  }

  const epoch = { ...SPEC_DEFAULTS.epoch, ...(i.epoch ?? {}) };
  const EPOCH_FIELDS = Object.keys(SPEC_DEFAULTS.epoch);
  for (const k of Object.keys(i.epoch ?? {})) {
    const removed = REMOVED_SETTINGS[`epoch.${k}`];
    if (removed) bad(`epoch.${k}`, removed);
    else if (!EPOCH_FIELDS.includes(k)) bad(`epoch.${k}`, `is not a setting; the epoch settings are ${EPOCH_FIELDS.join(', ')}`);
  }
  for (const k of ['maxRecords', 'maxBytes', 'maxWaitMs'] as const) {
    if (!positiveInt(epoch[k])) bad(`epoch.${k}`, `must be a positive integer, got ${JSON.stringify(epoch[k])}`);
  }
  if (positiveInt(epoch.maxWaitMs) && positiveInt(txTimeout) && epoch.maxWaitMs * 2 >= txTimeout) {
    bad('epoch.maxWaitMs', `must be well below kafkaSink.transactionTimeoutMs (${txTimeout}); lower it or raise the timeout`);
  }
  const deadLetter = { ...SPEC_DEFAULTS.deadLetter, ...(i.deadLetter ?? {}) };
  const DEAD_LETTER_FIELDS = Object.keys(SPEC_DEFAULTS.deadLetter);
  for (const k of Object.keys(i.deadLetter ?? {})) {
    if (!DEAD_LETTER_FIELDS.includes(k)) bad(`deadLetter.${k}`, `is not a setting; the dead-letter settings are ${DEAD_LETTER_FIELDS.join(', ')}`);
  }
  if (typeof deadLetter.maxRatio !== 'number' || !(deadLetter.maxRatio >= 0 && deadLetter.maxRatio <= 1)) {
    bad('deadLetter.maxRatio', `must be a number from 0 to 1 (the share of an epoch's records that may be dead-lettered), got ${JSON.stringify(deadLetter.maxRatio)}`);
  }
  if (!Number.isInteger(deadLetter.maxPerEpoch) || deadLetter.maxPerEpoch < 0) {
    bad('deadLetter.maxPerEpoch', `must be an integer ≥ 0 (the most dead letters in one epoch; 0: none), got ${JSON.stringify(deadLetter.maxPerEpoch)}`);
  }
  const epochsPerRun = i.epochsPerRun ?? SPEC_DEFAULTS.epochsPerRun;
  if (!positiveInt(epochsPerRun)) bad('epochsPerRun', `must be a positive integer, got ${JSON.stringify(epochsPerRun)}`);
  if (i.parallelism !== undefined && (!positiveInt(i.parallelism) || i.parallelism > MAX_PARALLELISM)) {
    bad('parallelism', `must be an integer from 1 to ${MAX_PARALLELISM} (the number of partition groups), got ${JSON.stringify(i.parallelism)}; leave it out for one workflow per source partition`);
  }
  const name = String(i.name);
  const deadLetterTopic = i.deadLetterTopic ?? `${name}.dlq`;
  const progressTopic = i.progressTopic ?? `onceflow.progress.${name}`;
  topic('deadLetterTopic', deadLetterTopic);
  topic('progressTopic', progressTopic);

  if (problems.length) throw new ValidationError(`pipeline ${JSON.stringify(i.name ?? '?')}`, problems);
  return {
    name,
    source: { topic: topics[0]!, ...(src?.topics !== undefined ? { topics } : {}), startFrom, discoveryIntervalMs },
    transform: i.transform!,
    ...(i.transformOptions ? { transformOptions: i.transformOptions } : {}),
    kafkaSink: { topic: i.kafkaSink!.topic, transactionTimeoutMs: txTimeout, transactionalIdPool: pool },
    mysqlSink: { tables: tables as TableSpec[], mode: mysqlMode },
    deadLetterTopic,
    progressTopic,
    deadLetter,
    epoch,
    epochsPerRun,
    ...(i.parallelism !== undefined ? { parallelism: i.parallelism } : {}),
  };
}

/** Every source topic of a pipeline, in definition order. */
export const sourceTopics = (spec: PipelineSpec): string[] => spec.source.topics ?? [spec.source.topic];

/** Workflow id of a pipeline's parent workflow and of one partition's workflow. */
export const pipelineWorkflowId = (pipeline: string) => `onceflow/${pipeline}`;
export const partitionWorkflowId = (pipeline: string, partition: number) => `onceflow/${pipeline}/${partition}`;
export const consumerGroupId = (pipeline: string) => `onceflow.${pipeline}`;
export const transactionalId = (pipeline: string, partition: number, slot: number) => `onceflow.${pipeline}.${partition}.${slot}`;

/** Most partition groups of a pipeline. */
export const MAX_PARALLELISM = 1024;
/** The group of source partition id `id` (pipelines with spec.parallelism). */
export const groupOf = (spec: PipelineSpec, id: number) => id % spec.parallelism!;
export const groupWorkflowId = (pipeline: string, group: number) => `onceflow/${pipeline}/group-${group}`;
/** The workflow that runs source partition id `id`: its group's, or its own. */
export const runnerWorkflowId = (spec: PipelineSpec, id: number) => (spec.parallelism ? groupWorkflowId(spec.name, groupOf(spec, id)) : partitionWorkflowId(spec.name, id));
/** A group's transactional ids ('g' keeps them apart from the partitions' own, which redos and older runs use). */
export const groupTransactionalId = (pipeline: string, group: number, slot: number) => `onceflow.${pipeline}.g${group}.${slot}`;
