/**
 * The memos the pipeline workflow gives the workflows it starts: what the Web UI shows beside a
 * partition or group workflow (names of topics and tables, never a credential).
 */
import type { SourceRef } from '../protocol';
import type { PipelineSpec } from '../spec';

const sinks = (spec: PipelineSpec) => ({
  kafkaSink: spec.kafkaSink.topic,
  tables: spec.mysqlSink.tables.map((t) => t.name).join(','),
});

/** A partition workflow's memo: its source partition id and where it reads. */
export const partitionMemo = (spec: PipelineSpec, id: number, s: SourceRef) => ({
  pipeline: spec.name,
  partition: id,
  source: s.topic,
  sourcePartition: s.partition,
  ...sinks(spec),
});

/**
 * A group names at most this many of the partitions it starts with: each takes about 30 bytes,
 * and the Temporal server warns of a memo over 2 KB (128 partitions per group took 3,995 bytes).
 * The group's status query lists every member, including those that join later.
 */
export const MEMO_MEMBERS = 16;

/** A group workflow's memo: the partitions it starts with (at most MEMO_MEMBERS named). */
export function groupMemo(spec: PipelineSpec, group: number, members: (SourceRef & { id: number })[]) {
  const named = members
    .slice(0, MEMO_MEMBERS)
    .map((x) => `${x.id} (${x.topic}[${x.partition}])`)
    .join(', ');
  const more = members.length - MEMO_MEMBERS;
  return {
    pipeline: spec.name,
    group,
    partitions:
      more > 0 ? `${named}, and ${more} more (${members.length} at start; the status query lists them all)` : named,
    ...sinks(spec),
  };
}
