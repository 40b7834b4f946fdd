/**
 * The partitions of a pipeline and their workflows, for the CLI: which source partition ids it
 * has, which workflow runs each, and the control updates sent to them.
 */
import type { Client } from '@temporalio/client';
import type { Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import { listSources } from '../mysql/sources';
import type { ControlAction } from '../protocol';
import { partitionWorkflowId, pipelineWorkflowId, runnerWorkflowId, type PipelineSpec } from '../spec';
import { pipelineSources } from '../verify';
import type { PipelineInfo } from '../workflows/interface';

/** How long the CLI waits for a workflow to answer a query (`status`, the pipeline's `info`): a worker must be polling. */
export const QUERY_DEADLINE_MS = 5_000;

/** Source partition ids: the ids given, else 0 … n-1 for a count (what callers passing the source topic's partition count mean). */
const idsOf = (partitions: number | number[]) =>
  Array.isArray(partitions) ? partitions : Array.from({ length: partitions }, (_, p) => p);

/**
 * The pipeline's source partition ids when it recorded them (src/mysql/sources.ts: every topic,
 * partitions added while it ran), else those of `partitions`: a caller passing the first source
 * topic's partition count still reaches every partition workflow of a pipeline with several topics.
 */
export async function recordedIds(pool: Pool, pipeline: string, partitions: number | number[]): Promise<number[]> {
  if (Array.isArray(partitions)) return partitions;
  const ids = (await listSources(pool, pipeline)).map((s) => s.id);
  return ids.length ? ids : idsOf(partitions);
}

/** The source partition ids a discovering pipeline workflow reports in its info query, with the workflow that runs each; null when it does not answer or predates discovery. */
async function startedIds(client: Client, pipeline: string): Promise<{ id: number; workflowId: string }[] | null> {
  try {
    const info = await client.withDeadline(Date.now() + QUERY_DEADLINE_MS, () =>
      client.workflow.getHandle(pipelineWorkflowId(pipeline)).query<PipelineInfo>('info'),
    );
    return info.sources ? info.sources.map((s) => ({ id: s.id, workflowId: s.workflowId })) : null;
  } catch {
    return null;
  }
}

/** Every source partition id of a pipeline (all topics, partitions added while it ran): what control, status and transactions act on. */
export async function pipelinePartitionIds(deps: { admin: Admin; pool: Pool }, spec: PipelineSpec): Promise<number[]> {
  return (await pipelineSources(deps, spec)).sources.map((s) => s.id);
}

/**
 * Sends a control action to the workflow that runs each source partition — its own, or its
 * group's with spec.parallelism — through its validated update; given a count, to every
 * partition the pipeline workflow says it started (all topics, added partitions). Which workflow
 * runs a partition: the pipeline workflow's answer, else the spec's (runnerWorkflowId), else
 * (given only a name) the partition's own. Then to a discovering pipeline workflow itself, so
 * that partitions it starts later get the same control state (a control that does not apply any
 * more is ignored there).
 */
export async function controlPartitions(
  client: Client,
  pipeline: string | PipelineSpec,
  partitions: number | number[],
  action: ControlAction,
): Promise<{ partition: number; ok: boolean; message: string }[]> {
  const out: { partition: number; ok: boolean; message: string }[] = [];
  const name = typeof pipeline === 'string' ? pipeline : pipeline.name;
  const started = await startedIds(client, name);
  const runner = (id: number) =>
    started?.find((s) => s.id === id)?.workflowId ??
    (typeof pipeline === 'string' ? partitionWorkflowId(name, id) : runnerWorkflowId(pipeline, id));
  const targets =
    !Array.isArray(partitions) && started ? started : idsOf(partitions).map((id) => ({ id, workflowId: runner(id) }));
  // One update per workflow: the partitions of a group (spec.parallelism) share the group's answer.
  const answers = new Map<string, Promise<{ ok: boolean; message: string }>>();
  for (const { id: p, workflowId } of targets) {
    if (!answers.has(workflowId)) {
      answers.set(
        workflowId,
        client.workflow
          .getHandle(workflowId)
          .executeUpdate('control', { args: [action] })
          .then(
            () => ({ ok: true, message: `${action} accepted` }),
            (e: unknown) => ({
              ok: false,
              message: (e as { cause?: { message?: string } }).cause?.message ?? (e as Error).message,
            }),
          ),
      );
    }
    out.push({ partition: p, ...(await answers.get(workflowId)!) });
  }
  // After the partitions' own updates (which answer), so none of them finds it applied already.
  if (started)
    await client.workflow
      .getHandle(pipelineWorkflowId(name))
      .signal('control', action)
      .catch(() => undefined);
  return out;
}
