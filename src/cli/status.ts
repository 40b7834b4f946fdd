/**
 * `onceflow status` as functions returning data: the pipelines (without an argument), or one row
 * per source partition of one (phase, epochs in flight, lag, last error) and whether it is stalled.
 */
import type { Client } from '@temporalio/client';
import type { Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import { ISOLATION, latestOffset, type KafkaCluster } from '../kafka/internals';
import { lastLedgerRow } from '../mysql/ledger';
import type { PartitionStatus } from '../protocol';
import { pipelineWorkflowId, runnerWorkflowId, sourceTopics, type PipelineSpec } from '../spec';
import { pipelineSources, type PipelineSourcePartition } from '../verify';
import { QUERY_DEADLINE_MS } from './partitions';

export interface PartitionRow {
  /** The source partition id (src/mysql/sources.ts); for a single-topic pipeline the topic's partition. */
  partition: number;
  /** Source topic and partition the id reads. */
  topic: string;
  topicPartition: number;
  /** "topic[partition]" when the pipeline has several source topics, else the partition number. */
  label: string;
  workflow: string;
  phase: string;
  epoch: number | null;
  committedOffset: number | null;
  sourceEnd: number;
  lag: number | null;
  lastError: string | null;
  /**
   * Seconds since the partition's last committed epoch (the status query's `lastCommitAt`, in
   * workflow time). Before the run's first commit, seconds since the run started — at least
   * that long without a commit (after continue-as-new that is about the last commit). Null
   * when the workflow is not running or does not answer.
   */
  sinceCommitSec: number | null;
  /** Epochs in flight and their step, e.g. "e12 committing, e13 preparing"; '' when none, null when unknown. */
  inFlight: string | null;
  /** The pending activity being retried (attempt > 1) with the most attempts, and its attempt number. */
  activity: string | null;
  attempt: number | null;
  /** What the partition waits on: the pending activity with its attempt (any attempt), else the epochs in flight, else null. */
  waitingOn: string | null;
  /** See `isStalled`. */
  stalled: boolean;
}

/** Default of `onceflow status --stalled-after <seconds>`. */
export const STALLED_AFTER_SEC = 60;
/** A pending activity on this attempt or later counts as stalled whatever the time since the last commit. */
export const STALLED_ATTEMPT = 5;
/** Phases in which a partition is expected to make progress (not paused, stopped, done or closed). */
const ACTIVE_PHASES = new Set(['reconciling', 'preparing', 'committing', 'redoing', 'no answer']);

/**
 * Whether a partition is stalled: it should be making progress (running, not paused, stopped or
 * done) and either an activity is being retried on attempt ≥ 5, or the source has records not
 * yet committed (lag > 0) while no epoch committed for more than `thresholdSec` seconds — or
 * the workflow does not even answer its status query (no worker). Pure.
 */
export function isStalled(
  row: Pick<PartitionRow, 'phase' | 'lag' | 'sinceCommitSec' | 'attempt'>,
  thresholdSec: number,
): boolean {
  if (!ACTIVE_PHASES.has(row.phase)) return false;
  if ((row.attempt ?? 0) >= STALLED_ATTEMPT) return true;
  if ((row.lag ?? 0) <= 0) return false;
  return row.phase === 'no answer' || (row.sinceCommitSec !== null && row.sinceCommitSec > thresholdSec);
}

/** The line `onceflow status` prints under its table for a stalled partition. Pure. */
export function describeStall(
  row: Pick<PartitionRow, 'partition' | 'sinceCommitSec' | 'waitingOn' | 'phase' | 'lastError'>,
): string {
  const since =
    row.phase === 'no answer'
      ? 'no worker answers its status query'
      : row.sinceCommitSec === null
        ? 'no commit seen'
        : `no commit for ${row.sinceCommitSec}s`;
  const on = row.waitingOn ?? `phase ${row.phase}`;
  return `partition ${row.partition}: ${since}, waiting on ${on}${row.lastError ? `: ${row.lastError}` : ''}`;
}

interface PendingActivity {
  type: string;
  attempt: number;
  lastError: string | null;
}

/** A workflow's status, pending activities (most attempts first) and run start; null if it does not exist. */
async function describeWorkflow(
  client: Client,
  id: string,
): Promise<{ status: string; startedAt: number; pending: PendingActivity[]; failure?: string } | null> {
  try {
    const d = await client.workflow.getHandle(id).describe();
    const pending = (d.raw.pendingActivities ?? [])
      .map((a) => ({
        type: a.activityType?.name ?? 'activity',
        attempt: Number(a.attempt ?? 1) || 1,
        lastError: a.lastFailure?.message || null,
      }))
      .sort((a, b) => b.attempt - a.attempt || Number(b.lastError !== null) - Number(a.lastError !== null));
    if (d.status.name !== 'FAILED') return { status: d.status.name, startedAt: d.startTime.getTime(), pending };
    return { status: d.status.name, startedAt: d.startTime.getTime(), pending, failure: await failureOf(client, id) };
  } catch (e) {
    if ((e as { name?: string }).name === 'WorkflowNotFoundError') return null;
    throw e;
  }
}

/** Why a failed workflow failed: the innermost message of its failure (e.g. a source topic that was deleted). */
async function failureOf(client: Client, id: string): Promise<string | undefined> {
  try {
    await client.workflow.getHandle(id).result();
  } catch (e) {
    let m = (e as Error).message;
    for (let c = (e as { cause?: unknown }).cause; c instanceof Error; c = (c as { cause?: unknown }).cause)
      m = c.message || m;
    return m;
  }
  return undefined;
}

/**
 * What keeps the pipeline's own workflow from starting partitions: its failure (e.g. a setup that
 * found a table missing or the transform not registered on the worker), or the error of the setup
 * activity it retries; null when there is none.
 */
export async function pipelineProblem(client: Client, spec: PipelineSpec): Promise<string | null> {
  const wf = await describeWorkflow(client, pipelineWorkflowId(spec.name));
  if (!wf) return null;
  if (wf.failure !== undefined || (wf.status !== 'RUNNING' && wf.status !== 'COMPLETED'))
    return `the pipeline workflow ${wf.status.toLowerCase()}${wf.failure ? `: ${wf.failure}` : ''}`;
  const stuck = wf.status === 'RUNNING' ? wf.pending.find((a) => a.lastError) : undefined;
  return stuck ? `the pipeline's ${stuck.type} attempt ${stuck.attempt} failed: ${stuck.lastError}` : null;
}

/** Partitions `status` looks at concurrently. */
const STATUS_CONCURRENCY = 8;

/**
 * One row per source partition of the pipeline — every partition workflow it started, on every
 * source topic, including partitions added while it runs (the same list as `verify`:
 * pipelineSources in src/verify/read.ts). Without `admin`, partitions 0 … partitions-1 of source.topic.
 * A source topic that no longer exists shows as an error on its partitions' rows.
 */
export async function pipelineStatus(
  deps: { client: Client; cluster: KafkaCluster; pool: Pool; admin?: Admin },
  spec: PipelineSpec,
  partitions: number,
  opts: { stalledAfterSec?: number } = {},
): Promise<PartitionRow[]> {
  const threshold = opts.stalledAfterSec ?? STALLED_AFTER_SEC;
  const { sources, goneTopics } = deps.admin
    ? await pipelineSources({ admin: deps.admin, pool: deps.pool }, spec)
    : {
        sources: Array.from({ length: partitions }, (_, p) => ({ id: p, topic: spec.source.topic, partition: p })),
        goneTopics: [] as string[],
      };
  const several = sourceTopics(spec).length > 1 || new Set(sources.map((s) => s.topic)).size > 1;
  // A partition without a workflow is not started: the pipeline's own problem says why, if it has one.
  const notStartedBecause = await pipelineProblem(deps.client, spec);
  const rowOf = async (src: PipelineSourcePartition): Promise<PartitionRow> => {
    const p = src.id;
    const id = runnerWorkflowId(spec, p);
    const wf = await describeWorkflow(deps.client, id);
    const gone = goneTopics.includes(src.topic)
      ? `source topic '${src.topic}' does not exist any more; partition ${src.partition} cannot be read`
      : null;
    const sourceEnd = gone
      ? null
      : await latestOffset(deps.cluster, src.topic, src.partition, ISOLATION.READ_COMMITTED);
    let phase = wf ? wf.status.toLowerCase() : 'not started';
    let epoch: number | null = null;
    let committedOffset: number | null = null;
    let sinceCommitSec: number | null = null;
    let inFlight: string | null = null;
    let queryError: string | null = null;
    let workflowNote: string | null = null;
    if (wf?.status === 'RUNNING') {
      let s: PartitionStatus | null = null;
      try {
        // A group's workflow answers for the member named (an ungrouped partition's ignores the argument).
        s = await deps.client.withDeadline(Date.now() + QUERY_DEADLINE_MS, () =>
          deps.client.workflow.getHandle(id).query<PartitionStatus, [number]>('status', p),
        );
      } catch (e) {
        // No worker polls the task queue, or the workflow task fails: that is what it waits on.
        phase = 'no answer';
        queryError = `the status query got no answer (${(e as Error).message}); is a worker running on the pipeline's task queue?`;
      }
      if (s) {
        phase = s.phase;
        epoch = s.state.epoch;
        committedOffset = s.state.offset;
        sinceCommitSec = Math.max(0, Math.floor((Date.now() - (s.lastCommitAt ?? wf.startedAt)) / 1000));
        inFlight = s.inFlight ? s.inFlight.map((e) => `e${e.epoch} ${e.step}`).join(', ') : null;
        workflowNote = s.lastError ?? null;
      }
    }
    if (committedOffset === null) {
      const l = await lastLedgerRow(deps.pool, spec.name, p);
      if (l) {
        epoch = l.epoch + 1;
        committedOffset = l.end;
      }
    }
    // A closed run still lists the activities it had pending; only a running one waits on them.
    const top = wf?.status === 'RUNNING' ? wf.pending[0] : undefined;
    const retrying = top && top.attempt > 1 ? top : undefined;
    const lastError =
      gone ??
      top?.lastError ??
      wf?.pending.map((a) => a.lastError).find((m) => m) ??
      queryError ??
      wf?.failure ??
      workflowNote ??
      (wf ? null : notStartedBecause);
    const waitingOn = top ? `${top.type} attempt ${top.attempt}` : inFlight || (queryError ? 'a worker' : null);
    const row = {
      partition: p,
      topic: src.topic,
      topicPartition: src.partition,
      label: several ? `${src.topic}[${src.partition}]` : String(p),
      workflow: id,
      phase,
      epoch,
      committedOffset,
      sourceEnd: sourceEnd ?? committedOffset ?? 0,
      lag: committedOffset === null || sourceEnd === null ? null : Math.max(0, sourceEnd - committedOffset),
      lastError: lastError ?? null,
      sinceCommitSec,
      inFlight,
      activity: retrying?.type ?? null,
      attempt: retrying?.attempt ?? null,
      waitingOn,
    };
    return { ...row, stalled: isStalled(row, threshold) };
  };
  // A few partitions at a time: a partition whose workflow does not answer costs the query deadline.
  const rows: PartitionRow[] = new Array(sources.length);
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < sources.length; i = next++) rows[i] = await rowOf(sources[i]!);
  };
  await Promise.all(Array.from({ length: Math.min(STATUS_CONCURRENCY, sources.length) }, lane));
  return rows;
}

export async function listPipelines(client: Client): Promise<{ pipeline: string; status: string; started: string }[]> {
  const out: { pipeline: string; status: string; started: string }[] = [];
  for await (const w of client.workflow.list({ query: "WorkflowType = 'pipelineWorkflow'" })) {
    const name = w.workflowId.replace(/^onceflow\//, '');
    if (out.some((o) => o.pipeline === name)) continue; // newest run first
    out.push({ pipeline: name, status: w.status.name, started: w.startTime.toISOString() });
  }
  return out;
}
