/**
 * Input help: `onceflow topics create <config>` creates a pipeline's source topics (the pipeline
 * creates its sink, dead-letter and progress topics itself, with the same createTopicsReady), and
 * `onceflow produce <topic> --file f.jsonl [--key field]` sends a JSON-lines file, one record per
 * line. Both need Kafka only.
 */
import { readFileSync } from 'node:fs';
import { logLevel, type Admin, type Message } from 'kafkajs';
import type { Settings } from '../config';
import { openKafka } from '../connections';
import { ConfigError, ValidationError } from '../errors';
import { createTopicsReady, partitionCounts } from '../kafka/topics';
import { loadPipelineConfig } from '../pipeline-file';
import { sourceTopics, type PipelineSpec } from '../spec';
import { UsageError, type CommandContext } from './context';

async function withKafka<T>(
  settings: Settings,
  fn: (k: Awaited<ReturnType<typeof openKafka>>) => Promise<T>,
): Promise<T> {
  const k = await openKafka(settings, `${settings.kafka.clientId}-cli`, logLevel.ERROR);
  try {
    return await fn(k);
  } finally {
    await Promise.allSettled([k.admin.disconnect(), k.cluster.disconnect()]);
  }
}

export interface TopicOutcome {
  topic: string;
  created: boolean;
  partitions: number;
}

/** Creates each source topic of `spec` that does not exist, with `partitions` partitions; one that exists is left as it is. */
export async function createSourceTopics(
  settings: Settings,
  spec: PipelineSpec,
  partitions: number,
): Promise<TopicOutcome[]> {
  return withKafka(settings, async ({ admin }) => {
    const topics = sourceTopics(spec);
    const before = await partitionCounts(admin, topics);
    const missing = topics.filter((t) => (before.get(t) ?? 0) === 0);
    if (missing.length)
      await createTopicsReady(
        admin,
        missing.map((topic) => ({
          topic,
          numPartitions: partitions,
          replicationFactor: settings.kafka.replicationFactor,
        })),
      );
    const after = await partitionCounts(admin, topics);
    return topics.map((topic) => ({ topic, created: missing.includes(topic), partitions: after.get(topic) ?? 0 }));
  });
}

/** The records of a JSON-lines file, or a ValidationError naming the file, the line and what is wrong with it. */
export function readJsonLines(file: string, keyField?: string): Message[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError('--file', `cannot read '${file}': ${(e as Error).message}`);
  }
  const out: Message[] = [];
  const lines = text.split('\n');
  for (const [i, raw] of lines.entries()) {
    const line = raw.replace(/\r$/, '');
    if (!line.trim()) continue;
    const at = `line ${i + 1}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      throw new ValidationError(file, [
        { field: at, problem: `not JSON (${(e as Error).message}); each line must be one JSON value` },
      ]);
    }
    if (keyField === undefined) {
      out.push({ value: line });
      continue;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new ValidationError(file, [{ field: at, problem: `--key ${keyField}: the line is not a JSON object` }]);
    const key = (value as Record<string, unknown>)[keyField];
    if (typeof key !== 'string' && typeof key !== 'number' && typeof key !== 'boolean') {
      throw new ValidationError(file, [
        {
          field: at,
          problem: `--key ${keyField}: ${key === undefined ? 'the field is missing' : `the field is ${key === null ? 'null' : 'not a string or number'}`}`,
        },
      ]);
    }
    out.push({ key: String(key), value: line });
  }
  return out;
}

const BATCH = 1000;

/** Checks every line of `file`, then produces them all to `topic` (which must exist); returns how many. */
export async function produceFile(
  settings: Settings,
  topic: string,
  file: string,
  keyField?: string,
): Promise<{ topic: string; records: number; partitions: number }> {
  const messages = readJsonLines(file, keyField);
  return withKafka(settings, async ({ kafka, admin }) => {
    const partitions = await existingPartitions(admin, topic);
    const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      for (let i = 0; i < messages.length; i += BATCH)
        await producer.send({ topic, acks: -1, messages: messages.slice(i, i + BATCH) });
    } finally {
      await producer.disconnect();
    }
    return { topic, records: messages.length, partitions };
  });
}

async function existingPartitions(admin: Admin, topic: string): Promise<number> {
  const n = (await partitionCounts(admin, [topic])).get(topic) ?? 0;
  if (n === 0)
    throw new Error(
      `topic '${topic}' does not exist; create it first (onceflow topics create <config.yaml|json> creates a pipeline's source topics)`,
    );
  return n;
}

/** `onceflow topics create <config> [--partitions n]`. */
export async function topicsCommand({ arg, args, o, out, need, usageError }: CommandContext): Promise<number> {
  if (arg !== 'create') throw usageError(`unknown 'topics' command '${arg ?? ''}'`);
  const cfg = loadPipelineConfig(need(args[1], 'config file'));
  const partitions = o.partitions === undefined ? 1 : Number(o.partitions);
  if (!Number.isInteger(partitions) || partitions < 1)
    throw new UsageError(`--partitions must be a whole number ≥ 1, got '${o.partitions}'`);
  const res = await createSourceTopics(cfg.settings, cfg.spec, partitions);
  out(
    res
      .map(
        (t) =>
          `${t.created ? 'created' : 'exists '} ${t.topic} (${t.partitions} partition${t.partitions === 1 ? '' : 's'})`,
      )
      .join('\n'),
    res,
  );
  return 0;
}

/** `onceflow produce <topic> --file <events.jsonl> [--key field]`. */
export async function produceCommand({ arg, o, settings, out, need }: CommandContext): Promise<number> {
  const file = o.file === undefined ? undefined : String(o.file);
  const res = await produceFile(
    settings,
    need(arg, 'topic'),
    need(file, '--file <events.jsonl>'),
    o.key === undefined ? undefined : String(o.key),
  );
  out(`produced ${res.records} record${res.records === 1 ? '' : 's'} from ${file} to ${res.topic}`, { ...res, file });
  return 0;
}
