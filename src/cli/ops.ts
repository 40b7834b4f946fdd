/**
 * What the CLI does, as functions returning data (the CLI prints them; tests call the CLI).
 */
import { partitionCounts } from '../kafka/topics';
import { historyFromJSON, historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { Client } from '@temporalio/client';
import type { Admin } from 'kafkajs';
import { Worker } from '@temporalio/worker';
import type { Pool } from 'mysql2/promise';
import { existsSync, readFileSync } from 'node:fs';
import { ISOLATION, latestOffset, type KafkaCluster } from '../kafka/internals';
import { lastLedgerRow } from '../mysql/ledger';
import { applyStaged, mysqlMode } from '../mysql/stage';
import { carryOut, examineGroupBranches, examinePartition, namedXids, resolveGroupBranches, settleGroupKafka, settleKafka, type GroupBranchDecision, type PartitionFindings } from '../recovery';
import type { ControlAction, PartitionStatus } from '../protocol';
import { partitionWorkflowId, pipelineWorkflowId, runnerWorkflowId, sourceTopics, type PipelineSpec } from '../spec';
import { pipelineSources, type PipelineSourcePartition } from '../verify';
import { listSources } from '../mysql/sources';
import type { PipelineInfo } from '../workflows/pipeline';

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
export function isStalled(row: Pick<PartitionRow, 'phase' | 'lag' | 'sinceCommitSec' | 'attempt'>, thresholdSec: number): boolean {
  if (!ACTIVE_PHASES.has(row.phase)) return false;
  if ((row.attempt ?? 0) >= STALLED_ATTEMPT) return true;
  if ((row.lag ?? 0) <= 0) return false;
  return row.phase === 'no answer' || (row.sinceCommitSec !== null && row.sinceCommitSec > thresholdSec);
}

/** The line `onceflow status` prints under its table for a stalled partition. Pure. */
export function describeStall(row: Pick<PartitionRow, 'partition' | 'sinceCommitSec' | 'waitingOn' | 'phase' | 'lastError'>): string {
  const since = row.phase === 'no answer' ? 'no worker answers its status query' : row.sinceCommitSec === null ? 'no commit seen' : `no commit for ${row.sinceCommitSec}s`;
  const on = row.waitingOn ?? `phase ${row.phase}`;
  return `partition ${row.partition}: ${since}, waiting on ${on}${row.lastError ? `: ${row.lastError}` : ''}`;
}

interface PendingActivity {
  type: string;
  attempt: number;
  lastError: string | null;
}

/** A partition workflow's status, pending activities (most attempts first) and run start; null if it does not exist. */
async function describePartition(client: Client, id: string): Promise<{ status: string; startedAt: number; pending: PendingActivity[]; failure?: string } | null> {
  try {
    const d = await client.workflow.getHandle(id).describe();
    const pending = (d.raw.pendingActivities ?? [])
      .map((a) => ({ type: a.activityType?.name ?? 'activity', attempt: Number(a.attempt ?? 1) || 1, lastError: a.lastFailure?.message || null }))
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
    for (let c = (e as { cause?: unknown }).cause; c instanceof Error; c = (c as { cause?: unknown }).cause) m = c.message || m;
    return m;
  }
  return undefined;
}

/** How long `status` waits for a partition workflow to answer its status query (a worker must be polling). */
const QUERY_DEADLINE_MS = 5_000;
/** Partitions `status` looks at concurrently. */
const STATUS_CONCURRENCY = 8;

async function workflowStatus(client: Client, id: string): Promise<{ status: string; lastError: string | null } | null> {
  try {
    const d = await client.workflow.getHandle(id).describe();
    const raw = d.raw.pendingActivities ?? [];
    const failure = raw.map((a) => a.lastFailure?.message).find((m) => m);
    return { status: d.status.name, lastError: failure ?? null };
  } catch (e) {
    if ((e as { name?: string }).name === 'WorkflowNotFoundError') return null;
    throw e;
  }
}

/**
 * One row per source partition of the pipeline — every partition workflow it started, on every
 * source topic, including partitions added while it runs (the same list as `verify`:
 * pipelineSources in src/verify.ts). Without `admin`, partitions 0 … partitions-1 of source.topic.
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
    : { sources: Array.from({ length: partitions }, (_, p) => ({ id: p, topic: spec.source.topic, partition: p })), goneTopics: [] as string[] };
  const several = sourceTopics(spec).length > 1 || new Set(sources.map((s) => s.topic)).size > 1;
  const rowOf = async (src: PipelineSourcePartition): Promise<PartitionRow> => {
    const p = src.id;
    const id = runnerWorkflowId(spec, p);
    const wf = await describePartition(deps.client, id);
    const gone = goneTopics.includes(src.topic) ? `source topic '${src.topic}' does not exist any more; partition ${src.partition} cannot be read` : null;
    const sourceEnd = gone ? null : await latestOffset(deps.cluster, src.topic, src.partition, ISOLATION.READ_COMMITTED);
    let phase = wf ? wf.status.toLowerCase() : 'not started';
    let epoch: number | null = null;
    let committedOffset: number | null = null;
    let sinceCommitSec: number | null = null;
    let inFlight: string | null = null;
    let queryError: string | null = null;
    if (wf?.status === 'RUNNING') {
      let s: PartitionStatus | null = null;
      try {
        // A group's workflow answers for the member named (an ungrouped partition's ignores the argument).
        s = await deps.client.withDeadline(Date.now() + QUERY_DEADLINE_MS, () => deps.client.workflow.getHandle(id).query<PartitionStatus, [number]>('status', p));
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
    const lastError = gone ?? top?.lastError ?? wf?.pending.map((a) => a.lastError).find((m) => m) ?? queryError ?? wf?.failure ?? null;
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

/** Source partition ids: the ids given, else 0 … n-1 for a count (what callers passing the source topic's partition count mean). */
const idsOf = (partitions: number | number[]) => (Array.isArray(partitions) ? partitions : Array.from({ length: partitions }, (_, p) => p));

/**
 * The pipeline's source partition ids when it recorded them (src/mysql/sources.ts: every topic,
 * partitions added while it ran), else those of `partitions`: a caller passing the first source
 * topic's partition count still reaches every partition workflow of a pipeline with several topics.
 */
async function recordedIds(pool: Pool, pipeline: string, partitions: number | number[]): Promise<number[]> {
  if (Array.isArray(partitions)) return partitions;
  const ids = (await listSources(pool, pipeline)).map((s) => s.id);
  return ids.length ? ids : idsOf(partitions);
}

/** The source partition ids a discovering pipeline workflow reports in its info query, with the workflow that runs each; null when it does not answer or predates discovery. */
async function startedIds(client: Client, pipeline: string): Promise<{ id: number; workflowId: string }[] | null> {
  try {
    const info = await client.withDeadline(Date.now() + QUERY_DEADLINE_MS, () => client.workflow.getHandle(pipelineWorkflowId(pipeline)).query<PipelineInfo>('info'));
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
 * Sends a control action to every partition workflow through its validated update — given a
 * count, to every partition workflow the pipeline workflow says it started (all topics, added
 * partitions) — and to a discovering pipeline workflow itself, so that partitions it starts
 * later get the same control state (a control that does not apply any more is ignored there).
 */
export async function controlPartitions(client: Client, pipeline: string, partitions: number | number[], action: ControlAction): Promise<{ partition: number; ok: boolean; message: string }[]> {
  const out: { partition: number; ok: boolean; message: string }[] = [];
  const started = Array.isArray(partitions) ? null : await startedIds(client, pipeline);
  const targets = started ?? idsOf(partitions).map((id) => ({ id, workflowId: partitionWorkflowId(pipeline, id) }));
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
            (e: unknown) => ({ ok: false, message: (e as { cause?: { message?: string } }).cause?.message ?? (e as Error).message }),
          ),
      );
    }
    out.push({ partition: p, ...(await answers.get(workflowId)!) });
  }
  // After the partitions' own updates (which answer), so none of them finds it applied already.
  if (started) await client.workflow.getHandle(pipelineWorkflowId(pipeline)).signal('control', action).catch(() => undefined);
  return out;
}

export async function loadHistoryFile(file: string) {
  if (!existsSync(file)) throw new Error(`history file ${file} does not exist`);
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`history file ${file} is not JSON (${(e as Error).message}); export one with 'onceflow export-history <workflow id>' or 'temporal workflow show --output json'`);
  }
  return historyFromJSON(json);
}

function replayOptions(workflowBundle: string | undefined) {
  return workflowBundle ? { workflowBundle: { codePath: workflowBundle } } : { workflowsPath: require.resolve('../workflows') };
}

/**
 * Replays a history file, or every run of a workflow id, with the current workflow code; a run
 * that the code would not produce again is reported with the nondeterminism error.
 */
export async function replay(
  client: Client | null,
  target: string,
  workflowBundle?: string,
  onProgress?: (done: number, total: number, run: string) => void,
): Promise<{ run: string; ok: boolean; error?: string }[]> {
  const histories: { run: string; history: Awaited<ReturnType<typeof loadHistoryFile>> }[] = [];
  if (target.endsWith('.json') || existsSync(target)) histories.push({ run: target, history: await loadHistoryFile(target) });
  else {
    if (!client) throw new Error('replaying a workflow id needs the Temporal server');
    for await (const w of client.workflow.list({ query: `WorkflowId = '${target.replace(/'/g, '')}'` })) {
      histories.push({ run: `${target}/${w.runId}`, history: await client.workflow.getHandle(target, w.runId).fetchHistory() });
    }
    if (histories.length === 0) throw new Error(`no workflow '${target}' on this server (and no such file)`);
  }
  const out: { run: string; ok: boolean; error?: string }[] = [];
  for (const h of histories) {
    try {
      await Worker.runReplayHistory(replayOptions(workflowBundle), h.history, h.run);
      out.push({ run: h.run, ok: true });
    } catch (e) {
      out.push({ run: h.run, ok: false, error: `${(e as Error).name}: ${(e as Error).message}` });
    }
    onProgress?.(out.length, histories.length, h.run);
  }
  return out;
}

export async function exportHistory(client: Client, workflowId: string, runId?: string): Promise<string> {
  return historyToJSON(await client.workflow.getHandle(workflowId, runId).fetchHistory());
}

export interface InDoubt {
  /** Prepared XA branches of partition groups (spec.parallelism) and what recovery would do with each. */
  groups: GroupBranchDecision[];
  /** Per partition: what the shared recovery path (src/recovery.ts) found and would do. */
  partitions: PartitionFindings[];
  /** Partitions held back by an open transaction (LSO below the high watermark). */
  kafka: { topic: string; partition: number; lso: number; highWatermark: number }[];
}

/** Lists what is in doubt and the decision each would get; changes nothing. */
export async function inDoubt(deps: { cluster: KafkaCluster; pool: Pool; admin?: Admin }, spec: PipelineSpec, partitions: number | number[]): Promise<InDoubt> {
  const found: PartitionFindings[] = [];
  const ids = await recordedIds(deps.pool, spec.name, partitions);
  const groups = await examineGroupBranches(deps.pool, spec, () => true, () => namedXids(deps.cluster, spec, ids), Date.now());
  for (const p of ids) {
    const f = await examinePartition(deps, spec, p, Date.now());
    if (f.refuse || f.epochs.some((e) => e.actions.length)) found.push(f);
  }
  const kafka: InDoubt['kafka'] = [];
  // The sink and dead-letter topics may have fewer partitions than the source has ids.
  const counts = deps.admin ? await partitionCounts(deps.admin, [spec.kafkaSink.topic, spec.deadLetterTopic]) : new Map<string, number>();
  for (const topic of [spec.kafkaSink.topic, spec.progressTopic, spec.deadLetterTopic]) {
    for (const p of ids) {
      if (p >= (counts.get(topic) ?? Infinity)) continue;
      const lso = await latestOffset(deps.cluster, topic, p, ISOLATION.READ_COMMITTED);
      const hw = await latestOffset(deps.cluster, topic, p, ISOLATION.READ_UNCOMMITTED);
      if (lso < hw) kafka.push({ topic, partition: p, lso, highWatermark: hw });
    }
  }
  return { groups, partitions: found, kafka };
}

/** One line per action of `inDoubt`'s findings. */
export function describeInDoubt(found: InDoubt): string[] {
  const lines: string[] = [];
  for (const g of found.groups) {
    const verb = { commit: `would commit (partition ${g.by?.partition}'s committed progress marker names it)`, rollback: 'would roll back (no committed progress marker names it)', leave: 'left alone (opened after this look)' }[g.do];
    lines.push(`group ${g.group} epoch ${g.groupEpoch}: XA ${g.xid}: ${verb}`);
  }
  for (const f of found.partitions) {
    if (f.refuse) lines.push(`partition ${f.partition}: not decidable: ${f.refuse}`);
    for (const e of f.epochs) {
      for (const a of e.actions) {
        const what = a.do === 'commit-branch' || a.do === 'rollback-branch' || a.do === 'leave' ? `XA ${a.xid}: ` : '';
        const verb = {
          'commit-branch': 'would commit (the committed progress marker names it)',
          'rollback-branch': 'would roll back (not the decided branch)',
          'apply-staged': 'committed, staged rows not yet in the tables → would apply',
          'redo-kafka': 'MySQL committed, Kafka did not → starting the pipeline redoes the Kafka side',
          'redo-mysql': 'Kafka committed, MySQL did not → starting the pipeline redoes the MySQL side',
          leave: `left alone (${'why' in a ? a.why : ''})`,
          refuse: `not decidable (${'why' in a ? a.why : ''})`,
        }[a.do];
        lines.push(`partition ${f.partition} epoch ${e.epoch}: ${what}${verb}`);
      }
    }
  }
  for (const k of found.kafka) lines.push(`Kafka ${k.topic}[${k.partition}] held back by an open transaction: LSO ${k.lso} < high watermark ${k.highWatermark} → would abort it (fence the transactional ids)`);
  return lines;
}

/**
 * Resolves what is in doubt for a pipeline that is not running, through the same recovery path
 * as reconcile: fence the partition's transactional ids, commit the branch the committed marker
 * names, roll back the others, apply committed staged rows. A side that must be redone is left
 * for reconcile, which runs when the pipeline is started again.
 */
export async function resolveInDoubt(deps: { client: Client; cluster: KafkaCluster; pool: Pool }, spec: PipelineSpec, partitions: number | number[]): Promise<string[]> {
  const ids = await recordedIds(deps.pool, spec.name, partitions);
  for (const p of ids) {
    const wf = await workflowStatus(deps.client, runnerWorkflowId(spec, p));
    if (wf?.status === 'RUNNING') {
      throw new Error(`pipeline ${spec.name} is running (partition ${p}); its workflows decide its transactions. Stop it first: onceflow stop ${spec.name}`);
    }
  }
  const parent = await workflowStatus(deps.client, pipelineWorkflowId(spec.name));
  if (parent?.status === 'RUNNING') throw new Error(`pipeline ${spec.name} is running; stop it first: onceflow stop ${spec.name}`);
  const done: string[] = [];
  const token = Date.now();
  const fenced = [];
  for (let g = 0; g < (spec.parallelism ?? 0); g++) fenced.push(...(await settleGroupKafka(deps.cluster, spec, g)));
  for (const p of ids) fenced.push(...(await settleKafka(deps.cluster, spec, p)));
  for (const id of fenced) done.push(`Kafka ${id}: fenced; any open transaction of it was aborted`);
  // Branches of partition groups first: they may hold ledger rows the partitions' recovery reads.
  done.push(...(await resolveGroupBranches(deps.pool, spec, await examineGroupBranches(deps.pool, spec, () => true, () => namedXids(deps.cluster, spec, ids), token))));
  for (const p of ids) {
    const f = await examinePartition(deps, spec, p, token);
    if (f.refuse) {
      done.push(`partition ${p}: not decidable: ${f.refuse}`);
      continue;
    }
    done.push(...(await carryOut(deps, spec, f, { apply: async (epoch) => mysqlMode(spec) === 'staged' && applyStaged(deps.pool, { pipeline: spec.name, partition: p, epoch }, spec.mysqlSink.tables) })));
  }
  return done;
}
