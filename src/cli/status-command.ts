/** `onceflow status [pipeline]`: what src/cli/status.ts returns, printed as a table with advice on stalled partitions. */
import { pipelineSpecOf } from '../client';
import { sourceTopics } from '../spec';
import { UsageError, withServices, type CommandContext } from './context';
import { pipelinePartitionIds } from './partitions';
import {
  describeStall,
  listPipelines,
  pipelineProblem,
  pipelineStatus,
  STALLED_AFTER_SEC,
  type PartitionRow,
} from './status';

/** `onceflow status [pipeline]`: the pipelines, or one pipeline per partition with advice on stalled ones. */
export function statusCommand({ arg, o, settings, out }: CommandContext): Promise<number> {
  return withServices(settings, async (s) => {
    if (!arg) {
      const list = await listPipelines(s.client);
      out(
        list.length
          ? list.map((p) => `${p.pipeline.padEnd(32)} ${p.status.padEnd(12)} started ${p.started}`).join('\n')
          : 'no pipelines',
        list,
      );
      return 0;
    }
    const stalledAfterSec = o['stalled-after'] === undefined ? STALLED_AFTER_SEC : Number(o['stalled-after']);
    if (!Number.isFinite(stalledAfterSec) || stalledAfterSec < 0)
      throw new UsageError(`--stalled-after must be a number of seconds ≥ 0, got '${o['stalled-after']}'`);
    const spec = await pipelineSpecOf(s.client, arg);
    const rows = await pipelineStatus(s, spec, (await pipelinePartitionIds(s, spec)).length, { stalledAfterSec });
    const problem = await pipelineProblem(s.client, spec);
    const stalled = rows.filter((r) => r.stalled);
    const advice = stalled.length
      ? [
          '',
          ...stalled.map(describeStall),
          `what to do: read the last error. 'onceflow transactions ${spec.name}' lists in-doubt XA branches and Kafka transactions and their decision.`,
          `A frozen (zombie) worker is fenced automatically. If the error persists: stop the pipeline, 'onceflow transactions ${spec.name} --resolve', start it again`,
          `(docs/usage.md, "When a partition stalls", also says how to stop a partition whose commit keeps failing).`,
        ]
      : [];
    out(
      `pipeline ${spec.name} (source ${sourceTopics(spec).join(', ')} → ${spec.kafkaSink.topic} + ${spec.mysqlSink.tables.map((t) => t.name).join(', ')})\n${problem ? `${problem}\n` : ''}${statusTable(rows)}${advice.map((l) => `\n${l}`).join('')}`,
      {
        pipeline: spec.name,
        problem,
        stalledAfterSec,
        partitions: rows,
      },
    );
    return 0;
  });
}

/** The per-partition table `onceflow status <pipeline>` prints. */
function statusTable(rows: PartitionRow[]): string {
  const head = [
    'partition',
    'phase',
    'epoch',
    'committed',
    'source-end',
    'lag',
    'since-commit',
    'in-flight',
    'retrying',
    'stalled',
    'last error',
  ];
  const body = rows.map((r) =>
    [
      r.label,
      r.phase,
      r.epoch ?? '-',
      r.committedOffset ?? '-',
      r.sourceEnd,
      r.lag ?? '-',
      r.sinceCommitSec === null ? '-' : `${r.sinceCommitSec}s`,
      r.inFlight || '-',
      r.activity ? `${r.activity} attempt ${r.attempt}` : '-',
      r.stalled ? 'STALLED' : 'no',
      r.lastError ?? '',
    ].map(String),
  );
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  return [head, ...body]
    .map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  '))
    .join('\n');
}
