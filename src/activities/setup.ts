/** Pipeline setup: checks the source and creates the sink, dead-letter and progress topics and the tables. */
import { createTopicsReady, missingTopics as absentTopics, partitionCountsOfKnown } from '../kafka/topics';
import { ConfigError } from '../errors';
import { ER_NO_SUCH_TABLE, sqlErrno } from '../mysql/errors';
import { ensureLedger } from '../mysql/ledger';
import { createTableSql } from '../mysql/sink';
import { ensureStagedTable, ensureStageTable, mysqlMode } from '../mysql/stage';
import { ensureSourcesTable, assignSources } from '../mysql/sources';
import type { SourceRef } from '../protocol';
import { sourceTopics, type PipelineSpec } from '../spec';
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

/** What describeSource found: every source partition of the pipeline with its id, and where outputs go. */
export interface SourceLayout {
  /** Number of source partition ids (the largest id + 1); for a single topic its partition count. */
  partitions: number;
  /** Absent in results recorded before several topics and discovery. */
  sources?: (SourceRef & { id: number })[];
  /** Source topics that do not exist (any more); only in discovery, which skips them. */
  missingTopics?: string[];
}

export function createSetup(ctx: ActivityContext) {
  const { admin, pool } = ctx;
  const setUpTables = async (spec: PipelineSpec) => {
    for (const [n, t] of spec.mysqlSink.tables.entries()) {
      const ddl = createTableSql(t);
      if (ddl) await pool.query(ddl);
      try {
        if (mysqlMode(spec) === 'staged') await ensureStageTable(pool, t);
      } catch (e) {
        if (sqlErrno(e) !== ER_NO_SUCH_TABLE) throw e;
        throw new ConfigError(
          `mysqlSink.tables[${n}].name`,
          `table '${t.name}' does not exist in the database; create it, or give its DDL under 'create'`,
        );
      }
    }
    await ensureLedger(pool);
    await ensureStagedTable(pool);
  };
  return {
    /**
     * Checks that this worker has the pipeline's transform and the source topics, creates missing sink/progress/dead-letter topics and tables,
     * assigns ids to source partitions not seen before (src/mysql/sources.ts) and grows the
     * progress topic to one partition per id. With `discovery` (the periodic look for new
     * partitions), a source topic that is gone is reported and skipped rather than refused.
     */
    async describeSource(spec: PipelineSpec, opts: { discovery?: boolean } = {}): Promise<SourceLayout> {
      return edge(
        async () => {
          // A worker without the pipeline's transform refuses the pipeline before any partition
          // starts: MissingTransform (not retryable) names the pipeline, the transform and --transforms.
          if (!opts.discovery) ctx.transforms.get(spec.transform, spec.name);
          const topics = sourceTopics(spec);
          // A source topic counts as missing only if it stays unlisted for a few seconds (a node
          // behind the controller answers without topics created moments ago).
          const { existing, missing: missingTopics } = await absentTopics(admin, topics, opts.discovery ? 0 : 5_000);
          if (missingTopics.length && !opts.discovery) {
            const field = spec.source.topics ? `source.topics[${topics.indexOf(missingTopics[0]!)}]` : 'source.topic';
            throw new ConfigError(
              field,
              `'${missingTopics[0]}' does not exist on the brokers; create it or fix the pipeline definition`,
            );
          }
          const present = topics.filter((t) => existing.has(t));
          // Listed topics exist: a node that does not show their partitions yet is waited for.
          const counts = present.length ? await partitionCountsOfKnown(admin, present) : new Map<string, number>();
          if (!opts.discovery) await ensureSourcesTable(pool);
          const { all } = await assignSources(
            pool,
            spec.name,
            present.flatMap((topic) =>
              Array.from({ length: counts.get(topic) ?? 0 }, (_, partition) => ({ topic, partition })),
            ),
          );
          const partitions = all.length;
          const wanted: [string, string][] = [
            ['kafkaSink.topic', spec.kafkaSink.topic],
            ['deadLetterTopic', spec.deadLetterTopic],
            ['progressTopic', spec.progressTopic],
          ];
          const missing = wanted.filter(([, t]) => !existing.has(t)).map(([, t]) => t);
          if (missing.length) {
            await createTopicsReady(
              admin,
              missing.map((topic) => ({
                topic,
                numPartitions: Math.max(1, partitions),
                replicationFactor: ctx.replicationFactor ?? -1,
                ...(topic === spec.progressTopic ? { configEntries: PROGRESS_TOPIC_CONFIG } : {}),
              })),
            );
          }
          // Every wanted topic exists now (listed, or created / found existing just above): one the
          // answering node does not show yet is waited for, and a TransientError at worst.
          const sinks = await partitionCountsOfKnown(
            admin,
            wanted.map(([, t]) => t),
          );
          // The progress topic has one partition per source partition id; the sink and dead-letter
          // topics are the user's and are never grown: outputs go to id mod their partition count.
          const progress = sinks.get(spec.progressTopic) ?? 0;
          if (progress < partitions) {
            await admin
              .createPartitions({ topicPartitions: [{ topic: spec.progressTopic, count: partitions }] })
              .catch(async (e: unknown) => {
                // Another attempt grew it first.
                if (
                  ((await partitionCountsOfKnown(admin, [spec.progressTopic])).get(spec.progressTopic) ?? 0) <
                  partitions
                )
                  throw e;
              });
          }
          const outputPartitions = sinks.get(spec.kafkaSink.topic) ?? 0;
          const deadLetterPartitions = sinks.get(spec.deadLetterTopic) ?? 0;
          for (const [field, t] of wanted) {
            if ((sinks.get(t) ?? 0) === 0) throw new ConfigError(field, `topic '${t}' has no partitions`);
          }
          // Tables only at the start: a periodic CREATE … IF NOT EXISTS would queue for the metadata
          // locks of prepared XA branches and hold up every branch behind it (design §6.8).
          if (!opts.discovery) await setUpTables(spec);
          // Only partitions that exist now: a topic deleted and created again with fewer partitions
          // keeps its old ids, and a partition workflow for a partition that is not there would retry forever.
          const sources = all
            .filter((a) => a.partition < (counts.get(a.topic) ?? 0))
            .map((a) => ({
              id: a.id,
              topic: a.topic,
              partition: a.partition,
              outputPartitions,
              deadLetterPartitions,
              ...(a.discovered ? { startFrom: 'earliest' as const } : {}),
            }));
          return { partitions, sources, ...(missingTopics.length ? { missingTopics } : {}) };
        },
        { decided: false },
      );
    },
  };
}
