/** Pipeline setup: checks the source and creates the sink, dead-letter and progress topics and the tables. */
import { ConfigError } from '../errors';
import { ER_NO_SUCH_TABLE, sqlErrno } from '../mysql/errors';
import { ensureLedger } from '../mysql/ledger';
import { createTableSql } from '../mysql/sink';
import { ensureStagedTable, ensureStageTable, mysqlMode } from '../mysql/stage';
import type { PipelineSpec } from '../spec';
import { edge, type ActivityContext } from './context';

/**
 * The progress topic keeps what recovery reads and no more: markers are keyed by source
 * partition, and compaction keeps the newest committed one of each (the log cleaner ignores
 * aborted transactions). Recovery asks only about the last epoch or the one in flight, and no
 * marker is compacted away before it is an hour old; small segments let the cleaner run at all.
 */
export const PROGRESS_TOPIC_CONFIG = [
  { name: 'cleanup.policy', value: 'compact' },
  { name: 'min.compaction.lag.ms', value: String(60 * 60_000) },
  { name: 'segment.bytes', value: String(8 * 1024 * 1024) },
  { name: 'segment.ms', value: String(60 * 60_000) },
];

export function createSetup(ctx: ActivityContext) {
  const { admin, pool } = ctx;
  return {
    /** Checks the source, creates missing sink/progress/dead-letter topics and tables; returns the partition count. */
    async describeSource(spec: PipelineSpec): Promise<{ partitions: number }> {
      return edge(async () => {
        const existing = new Set(await admin.listTopics());
        if (!existing.has(spec.source.topic)) {
          throw new ConfigError('source.topic', `'${spec.source.topic}' does not exist on the brokers; create it or fix the pipeline definition`);
        }
        const meta = await admin.fetchTopicMetadata({ topics: [spec.source.topic] });
        const partitions = meta.topics[0]?.partitions.length ?? 0;
        const wanted: [string, string][] = [
          ['kafkaSink.topic', spec.kafkaSink.topic],
          ['deadLetterTopic', spec.deadLetterTopic],
          ['progressTopic', spec.progressTopic],
        ];
        const missing = wanted.filter(([, t]) => !existing.has(t)).map(([, t]) => t);
        if (missing.length) {
          await admin.createTopics({
            waitForLeaders: true,
            topics: missing.map((topic) => ({ topic, numPartitions: partitions, replicationFactor: -1, ...(topic === spec.progressTopic ? { configEntries: PROGRESS_TOPIC_CONFIG } : {}) })),
          });
        }
        const sinkMeta = await admin.fetchTopicMetadata({ topics: wanted.map(([, t]) => t) });
        for (const [field, t] of wanted) {
          const n = sinkMeta.topics.find((x) => x.name === t)?.partitions.length ?? 0;
          if (n < partitions) {
            throw new ConfigError(field, `topic '${t}' has ${n} partitions but the source has ${partitions}; onceflow writes each source partition's output to the same partition number. Add partitions to '${t}' or use another topic`);
          }
        }
        for (const [n, t] of spec.mysqlSink.tables.entries()) {
          const ddl = createTableSql(t);
          if (ddl) await pool.query(ddl);
          try {
            if (mysqlMode(spec) === 'staged') await ensureStageTable(pool, t);
          } catch (e) {
            if (sqlErrno(e) !== ER_NO_SUCH_TABLE) throw e;
            throw new ConfigError(`mysqlSink.tables[${n}].name`, `table '${t.name}' does not exist in the database; create it, or give its DDL under 'create'`);
          }
        }
        await ensureLedger(pool);
        await ensureStagedTable(pool);
        return { partitions };
      });
    },
  };
}
