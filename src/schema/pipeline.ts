/**
 * The pipeline definition, written once: the types of src/spec.ts are inferred from this schema,
 * definePipeline and config files validate through it, and schema/pipeline-config.schema.json is
 * generated from it (src/schema/config-file.ts, `npm run schema`). Every rule says what to do
 * when it is broken; fields' descriptions are what editors show.
 *
 * Not for workflow code: src/spec.ts imports only its types, so the workflow bundle holds no zod.
 */
import { z } from 'zod';
import {
  COLUMN_TYPE_RE,
  DISCOVERY_INTERVAL_BOUNDS,
  IDENTIFIER_RE,
  MAX_PARALLELISM,
  SPEC_DEFAULTS,
  type PipelineInput,
  type PipelineSpec,
} from '../spec';
import { flag, got, namesSecret, strictObject, typeProblem, validate } from './problems';

const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,39}$/;
const TOPIC_RE = /^[a-zA-Z0-9._-]{1,249}$/;

/** Paths (below transformOptions) of keys that name a secret (namesSecret), at any depth. */
function secretKeys(v: unknown, path: PropertyKey[] = []): [PropertyKey[], string][] {
  if (!v || typeof v !== 'object') return [];
  return Object.entries(v).flatMap(([k, x]) => {
    const at = [...path, Array.isArray(v) ? Number(k) : k];
    const secret = !Array.isArray(v) && namesSecret(k);
    return [...(secret ? [[at, k] as [PropertyKey[], string]] : []), ...secretKeys(x, at)];
  });
}

/** An integer; `problem` words every value below min or above max (if given). */
function int(min: number, max: number | undefined, problem: (iss: { input?: unknown }) => string) {
  const atLeast = z.int({ error: (iss) => typeProblem('int', iss.input) }).min(min, { error: problem });
  return max === undefined ? atLeast : atLeast.max(max, { error: problem });
}
const positive = () => int(1, undefined, (iss) => `must be a positive integer, got ${got(iss)}`);
const topicName = () =>
  z.string().regex(TOPIC_RE, {
    error: (iss) => `must be a Kafka topic name (letters, digits, '.', '_', '-'), got ${got(iss)}`,
  });
const identifier = () =>
  z.string().regex(IDENTIFIER_RE, { error: (iss) => `must match ${IDENTIFIER_RE}, got ${got(iss)}` });
/** Column names: the prefix 'onceflow_' belongs to the staging tables' own columns. */
const column = () =>
  identifier().refine((c) => !c.toLowerCase().startsWith('onceflow_'), {
    error: (iss) =>
      `'${String(iss.input)}': the prefix 'onceflow_' is reserved for onceflow's staging columns; rename the column`,
  });

const source = strictObject({
  topic: topicName().optional(),
  topics: z
    .array(topicName())
    .min(1, { error: (iss) => `must be a non-empty list of topic names, got ${got(iss)}` })
    .optional()
    .describe('several source topics; each (topic, partition) gets its own partition workflow'),
  startFrom: z.enum(['earliest', 'latest']).default(SPEC_DEFAULTS.startFrom),
  discoveryIntervalMs: int(
    DISCOVERY_INTERVAL_BOUNDS.min,
    DISCOVERY_INTERVAL_BOUNDS.max,
    (iss) =>
      `must be an integer from ${DISCOVERY_INTERVAL_BOUNDS.min} to ${DISCOVERY_INTERVAL_BOUNDS.max} ms (how often new partitions are looked for), got ${got(iss)}`,
  )
    .default(SPEC_DEFAULTS.discoveryIntervalMs)
    .describe(
      `how often partitions added to the source topics are looked for (${DISCOVERY_INTERVAL_BOUNDS.min} to ${DISCOVERY_INTERVAL_BOUNDS.max}; default ${SPEC_DEFAULTS.discoveryIntervalMs})`,
    ),
})
  .check((ctx) => {
    const { topic, topics } = ctx.value;
    if (topic !== undefined && topics !== undefined)
      flag(ctx, [], ctx.value, "give either 'topic' or 'topics', not both");
    else if (topic === undefined && topics === undefined)
      flag(ctx, ['topic'], undefined, "is required: give the source topic (or 'topics', a list of them)");
    topics?.forEach((t, k) => {
      if (topics.indexOf(t) !== k) flag(ctx, ['topics', k], t, `'${t}' is listed twice`);
    });
  })
  .describe('exactly one of topic and topics');

/** Columns a table mode updates: `needed` says what an empty or missing list lacks. */
const modeColumns = (needed: string) =>
  z
    .array(z.string(), { error: (iss) => (iss.input === undefined ? needed : undefined) })
    .min(1, { error: needed })
    .describe('the columns to add up or overwrite');
const onlyForNewest = () => z.never({ error: "is only for kind 'newest'" }).optional();
const ON_DUPLICATE_KINDS =
  "'accumulate' (add up), 'replace' (last write wins), 'newest' (the greater version wins) or 'ignore' (first write wins)";
const versionProblem = (iss: { input?: unknown }) =>
  `must name the version column (${IDENTIFIER_RE}), e.g. an event time; got ${got(iss)}`;

const onDuplicate = z
  .discriminatedUnion(
    'kind',
    [
      strictObject({
        kind: z.literal('accumulate').describe('add up columns'),
        columns: modeColumns('must list the columns to accumulate'),
        version: onlyForNewest(),
      }),
      strictObject({
        kind: z
          .literal('replace')
          .describe('overwrite columns, last write wins (with several source partitions: whichever committed last)'),
        columns: modeColumns('must list the columns to replace'),
        version: onlyForNewest(),
      }),
      strictObject({
        kind: z
          .literal('newest')
          .describe('overwrite columns and the version column only when the incoming version is greater'),
        version: z
          .string({ error: versionProblem })
          .regex(IDENTIFIER_RE, { error: versionProblem })
          .describe(
            'the version column (e.g. an event time; a number, BIGINT or DATETIME); a row whose version is null is dead-lettered',
          ),
        // Without columns, newest keeps only the version up to date: a running maximum.
        columns: z.array(z.string()).optional().describe('the columns to overwrite with the newer version'),
      }),
      strictObject({
        kind: z.literal('ignore').describe('keep the first row (insert-only)'),
        version: onlyForNewest(),
      }),
    ],
    {
      error: (iss) =>
        iss.code === 'invalid_union'
          ? `must be ${ON_DUPLICATE_KINDS}, got ${JSON.stringify((iss.input as { kind?: unknown } | undefined)?.kind)}`
          : undefined,
    },
  )
  .describe('how a row combines with the one already under its key (docs/design.md, table modes)');

const create = strictObject({
  columns: z
    .record(
      z.string().regex(IDENTIFIER_RE),
      z.string().regex(COLUMN_TYPE_RE, {
        error: (iss) =>
          `must be a plain column type such as 'BIGINT NOT NULL' or 'DECIMAL(12, 2)' (words and numbers, one (n) or (n, m) after a word), got ${got(iss)}`,
      }),
      {
        error: (iss) => (iss.code === 'invalid_key' ? `column name must match ${IDENTIFIER_RE}` : undefined),
      },
    )
    .describe('DDL per column, e.g. {"indicate": "BIGINT NOT NULL"}'),
  primaryKey: z.array(z.string()).min(1, { error: 'must list the key columns' }),
})
  .check((ctx) => {
    ctx.value.primaryKey.forEach((c, k) => {
      if (!(c in ctx.value.columns)) flag(ctx, ['primaryKey', k], c, `'${c}' is not in create.columns`);
    });
  })
  .describe('created with CREATE TABLE IF NOT EXISTS when given');

const table = strictObject({
  name: identifier(),
  columns: z
    .array(column())
    .min(1, { error: 'must list at least one column' })
    .describe("written by the transform's row operations, in statement order"),
  onDuplicate,
  create: create.optional(),
}).check((ctx) => {
  const t = ctx.value;
  const od = t.onDuplicate;
  const bad = (path: (string | number)[], input: unknown, message: string) =>
    flag(ctx, ['onDuplicate', ...path], input, message);
  if (od.kind === 'ignore') return;
  od.columns?.forEach((c, k) => {
    if (!t.columns.includes(c)) bad(['columns', k], c, `'${c}' is not one of the table's columns`);
  });
  if (od.kind !== 'newest') return;
  if (!t.columns.includes(od.version))
    bad(['version'], od.version, `'${od.version}' is not one of the table's columns (${t.columns.join(', ')})`);
  else if (t.create?.primaryKey.includes(od.version)) {
    bad(
      ['version'],
      od.version,
      `'${od.version}' is in create.primaryKey: a version in the key makes every version a row of its own; take it out of the key`,
    );
  }
});

const mysqlSink = strictObject({
  tables: z
    .array(table, { error: (iss) => `must be an array of table definitions (may be empty), got ${got(iss)}` })
    .check((ctx) => {
      ctx.value.forEach((t, n) => {
        if (ctx.value.findIndex((u) => u.name === t.name) !== n)
          flag(ctx, [n, 'name'], t.name, `'${t.name}' is defined twice`);
      });
    }),
  mode: z
    .enum(['staged', 'direct'])
    .default('staged')
    .describe(
      'staged (default): rows are staged inside the XA branch and applied to the tables right after XA COMMIT, so a prepared branch never locks table rows; direct: rows are written to the tables inside the XA branch',
    ),
});

const { epoch: EPOCH, deadLetter: DEAD_LETTER } = SPEC_DEFAULTS;
const ratioProblem = (iss: { input?: unknown }) =>
  `must be a number from 0 to 1 (the share of an epoch's records that may be dead-lettered), got ${got(iss)}`;

/** The pipeline definition as written (in code or under `pipeline:` in a config file). */
export const pipelineSchema = strictObject({
  name: z
    .string()
    .regex(NAME_RE, {
      error: (iss) => `must match ${NAME_RE} (lower-case letters, digits, '.', '_', '-'; at most 40), got ${got(iss)}`,
    })
    .describe(NAME_RE.source.slice(1, -1)),
  source,
  transform: z
    .string()
    .min(1, { error: 'must name a transform registered on the workers' })
    .describe('name of a transform registered on the workers, e.g. flink-compare'),
  transformOptions: z
    .record(z.string(), z.unknown())
    .check((ctx) => {
      for (const [path, key] of secretKeys(ctx.value))
        flag(
          ctx,
          path,
          undefined,
          `'${key}' looks like a secret, and transformOptions travel through workflow history and the Web UI: give it to the transform through the worker's environment or a file it reads, in the transforms module`,
        );
    })
    .optional()
    .describe('free-form, JSON-serialisable options handed to the transform (no secrets)'),
  kafkaSink: strictObject({
    topic: topicName(),
    transactionTimeoutMs: int(1000, undefined, (iss) => `must be an integer ≥ 1000 ms, got ${got(iss)}`)
      .default(SPEC_DEFAULTS.transactionTimeoutMs)
      .describe('Kafka transaction timeout; must exceed the longest prepare→commit gap'),
    transactionalIdPool: int(2, 16, (iss) => `must be an integer from 2 to 16, got ${got(iss)}`)
      .default(SPEC_DEFAULTS.transactionalIdPool)
      .describe(
        'transactional ids per partition used in rotation (2 to 16), so a stale commit can never hit a newer transaction',
      ),
  }),
  mysqlSink,
  deadLetterTopic: topicName()
    .optional()
    .describe('topic that receives the records the transform rejected (default <name>.dlq)'),
  progressTopic: topicName()
    .optional()
    .describe(
      'topic of one progress marker per committed epoch and source partition (default onceflow.progress.<name>)',
    ),
  deadLetter: strictObject({
    maxRatio: z
      .number()
      .min(0, { error: ratioProblem })
      .max(1, { error: ratioProblem })
      .default(DEAD_LETTER.maxRatio)
      .describe(
        `share of an epoch's records (0 to 1) that may be dead-lettered (default ${DEAD_LETTER.maxRatio}); verify judges the whole run by it`,
      ),
    maxPerEpoch: int(
      0,
      undefined,
      (iss) => `must be an integer ≥ 0 (the most dead letters in one epoch; 0: none), got ${got(iss)}`,
    )
      .default(DEAD_LETTER.maxPerEpoch)
      .describe(
        `most dead letters in one epoch (default ${DEAD_LETTER.maxPerEpoch}); 0: any dead letter halts the partition`,
      ),
  })
    .prefault({})
    .describe(
      'the dead-letter budget: an epoch of n records may dead-letter min(maxPerEpoch, max(1, floor(maxRatio * n))) of them; one more and the partition halts with an error, nothing of that epoch committed',
    ),
  epoch: strictObject({
    maxRecords: positive().default(EPOCH.maxRecords).describe('most source records per epoch'),
    maxBytes: positive().default(EPOCH.maxBytes).describe('most source bytes per epoch (keys + values)'),
    maxWaitMs: positive().default(EPOCH.maxWaitMs).describe('longest wait for data before an epoch closes'),
  }).prefault({}),
  epochsPerRun: positive().default(SPEC_DEFAULTS.epochsPerRun).describe('continue-as-new after this many epochs'),
  parallelism: int(
    1,
    MAX_PARALLELISM,
    (iss) =>
      `must be an integer from 1 to ${MAX_PARALLELISM} (the number of partition groups), got ${got(iss)}; leave it out for one workflow per source partition`,
  )
    .optional()
    .describe(
      'partition groups: this many workflows, source partition p in group p mod parallelism, each epoch one Kafka transaction and one XA branch per group (default: one per source partition)',
    ),
})
  .check((ctx) => {
    const p = ctx.value;
    const topics = p.source.topics ?? [p.source.topic];
    if (topics.includes(p.kafkaSink.topic)) {
      flag(
        ctx,
        ['kafkaSink', 'topic'],
        p.kafkaSink.topic,
        `must differ from ${p.source.topics ? 'every one of source.topics' : 'source.topic'} (a pipeline reading its own output never ends)`,
      );
    }
    if (p.epoch.maxWaitMs * 2 >= p.kafkaSink.transactionTimeoutMs) {
      flag(
        ctx,
        ['epoch', 'maxWaitMs'],
        p.epoch.maxWaitMs,
        `must be well below kafkaSink.transactionTimeoutMs (${p.kafkaSink.transactionTimeoutMs}); lower it or raise the timeout`,
      );
    }
  })
  // What travels through history: the first source topic as `topic`, the topics' defaults filled.
  .transform(({ deadLetterTopic, progressTopic, ...p }) => {
    const { topic, topics, ...source } = p.source;
    return {
      ...p,
      // One of topic and topics is there: the source's check refused neither and both.
      source: { topic: topics?.[0] ?? topic!, ...(topics ? { topics } : {}), ...source },
      deadLetterTopic: deadLetterTopic ?? `${p.name}.dlq`,
      progressTopic: progressTopic ?? `onceflow.progress.${p.name}`,
    };
  });

/** Fills defaults and validates; throws ValidationError naming every wrong field and the fix. */
export function definePipeline(input: PipelineInput): PipelineSpec {
  return validate(
    pipelineSchema,
    input,
    `pipeline ${JSON.stringify((input as { name?: unknown } | undefined)?.name ?? '?')}`,
    '(definition)',
  );
}
