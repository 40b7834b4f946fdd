/**
 * Benchmark child B: the same pipeline at-least-once, the way one would write it without
 * onceflow — a kafkajs consumer group, the same transform, a plain (non-transactional) producer
 * and batched MySQL upserts in short local transactions, source offsets committed after both
 * sinks acknowledged. No Temporal, no Kafka transactions, no XA.
 */
import { Kafka, logLevel, type EachBatchPayload } from 'kafkajs';
import { createPool } from 'mysql2/promise';
import { applyTransform, tableMap } from '../../src/activities/apply';
import { loadSettings } from '../../src/config';
import { kafkaClientConfig } from '../../src/kafka/client-config';
import { createTableSql, detectDialect, inLocalTransaction, writeRows } from '../../src/mysql/sink';
import type { PipelineSpec } from '../../src/spec';
import type { SourceRecord } from '../../src/transforms/registry';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import { send, serveUsage } from './ipc';

/** Most output records per produce request of the baseline. */
const OUTPUT_CHUNK = 1000;

export interface BaselineArgs {
  spec: PipelineSpec;
  groupId: string;
  partitions: number;
}

/** What the baseline reports per processed batch. */
export interface BaselineBatch {
  kind: 'batch';
  partition: number;
  records: number;
  /** when the batch arrived from the consumer */ readAt: number;
  /** when both sinks acknowledged it */ doneAt: number;
}

async function main() {
  const settings = loadSettings();
  const kafka = new Kafka({
    ...kafkaClientConfig(settings.kafka, 'onceflow-bench-baseline'),
    logLevel: logLevel.ERROR,
  });
  const pool = createPool({ ...settings.mysql, connectionLimit: 8 });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const dialect = await detectDialect(pool);
  let consumer: ReturnType<Kafka['consumer']> | undefined;

  serveUsage(
    async () => {
      await consumer?.disconnect();
      await producer.disconnect();
      await pool.end();
    },
    (raw) => {
      void run(raw as BaselineArgs).catch((e) =>
        send({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
      );
    },
  );
  send({ type: 'ready' });

  async function run(args: BaselineArgs) {
    const { spec } = args;
    const tables = tableMap(spec);
    for (const t of spec.mysqlSink.tables) {
      const ddl = createTableSql(t);
      if (ddl) await pool.query(ddl);
    }
    const transform = compareTransforms().get(spec.transform);
    consumer = kafka.consumer({ groupId: args.groupId, readUncommitted: false, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic: spec.source.topic, fromBeginning: true });
    await consumer.run({
      partitionsConsumedConcurrently: args.partitions,
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary, heartbeat }: EachBatchPayload) => {
        if (batch.messages.length === 0) return;
        const readAt = Date.now();
        const records: SourceRecord[] = batch.messages.map((m) => ({
          topic: batch.topic,
          partition: batch.partition,
          offset: Number(m.offset),
          key: m.key,
          value: m.value,
          headers: {},
          timestamp: m.timestamp,
        }));
        const ctx = {
          pipeline: spec.name,
          partition: batch.partition,
          epoch: 0,
          attempt: 1,
          options: spec.transformOptions ?? {},
        };
        const applied = await applyTransform(spec, transform, records, ctx, tables);
        const mysql = () => inLocalTransaction(pool, (conn) => writeRows(conn, applied.rows, tables, dialect));
        // In chunks: one partition's fetched batch (up to 1 MiB) transformed can exceed the
        // broker's message.max.bytes as one record batch (seen at 16 partitions).
        const kafkaOut = async () => {
          for (let i = 0; i < Math.max(applied.outputs.length, applied.deadLetters.length); i += OUTPUT_CHUNK) {
            const topicMessages = [
              { topic: spec.kafkaSink.topic, messages: applied.outputs.slice(i, i + OUTPUT_CHUNK) },
              { topic: spec.deadLetterTopic, messages: applied.deadLetters.slice(i, i + OUTPUT_CHUNK) },
            ].filter((t) => t.messages.length > 0);
            if (topicMessages.length) await producer.sendBatch({ topicMessages, acks: -1 });
          }
        };
        await Promise.all([mysql(), kafkaOut()]);
        resolveOffset(batch.lastOffset());
        await commitOffsetsIfNecessary();
        await heartbeat();
        const event: BaselineBatch = {
          kind: 'batch',
          partition: batch.partition,
          records: records.length,
          readAt,
          doneAt: Date.now(),
        };
        send({ type: 'event', event });
      },
    });
  }
}

main().catch((e) => {
  send({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exit(1);
});
