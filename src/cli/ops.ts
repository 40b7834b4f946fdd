/**
 * What the CLI does, as functions returning data (the CLI prints them; tests call the CLI).
 */
import { historyFromJSON, historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { Client } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import type { Pool } from 'mysql2/promise';
import { existsSync, readFileSync } from 'node:fs';
import { ISOLATION, PreparedTransaction, earliestOffset, latestOffset, type KafkaCluster } from '../kafka/internals';
import { committedMarkers } from '../kafka/progress';
import { commitBranch, lastLedgerRow, ledgerRow, parseGtrid, recoverXids, rollbackXid, xidToString } from '../mysql/xa';
import { applyStaged, pendingEpochs } from '../mysql/stage';
import type { ControlAction, PartitionStatus } from '../protocol';
import { partitionWorkflowId, pipelineWorkflowId, transactionalId, type PipelineSpec } from '../spec';

export interface PartitionRow {
  partition: number;
  workflow: string;
  phase: string;
  epoch: number | null;
  committedOffset: number | null;
  sourceEnd: number;
  lag: number | null;
  lastError: string | null;
}

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

export async function pipelineStatus(deps: { client: Client; cluster: KafkaCluster; pool: Pool }, spec: PipelineSpec, partitions: number): Promise<PartitionRow[]> {
  const rows: PartitionRow[] = [];
  for (let p = 0; p < partitions; p++) {
    const id = partitionWorkflowId(spec.name, p);
    const wf = await workflowStatus(deps.client, id);
    const sourceEnd = await latestOffset(deps.cluster, spec.source.topic, p, ISOLATION.READ_COMMITTED);
    let phase = wf ? wf.status.toLowerCase() : 'not started';
    let epoch: number | null = null;
    let committedOffset: number | null = null;
    if (wf?.status === 'RUNNING') {
      const s = await deps.client.workflow.getHandle(id).query<PartitionStatus>('status');
      phase = s.phase;
      epoch = s.state.epoch;
      committedOffset = s.state.offset;
    } else {
      const l = await lastLedgerRow(deps.pool, spec.name, p);
      if (l) {
        epoch = l.epoch + 1;
        committedOffset = l.end;
      }
    }
    rows.push({ partition: p, workflow: id, phase, epoch, committedOffset, sourceEnd, lag: committedOffset === null ? null : Math.max(0, sourceEnd - committedOffset), lastError: wf?.lastError ?? null });
  }
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

/** Sends a control action to every partition workflow through its validated update. */
export async function controlPartitions(client: Client, pipeline: string, partitions: number, action: ControlAction): Promise<{ partition: number; ok: boolean; message: string }[]> {
  const out: { partition: number; ok: boolean; message: string }[] = [];
  for (let p = 0; p < partitions; p++) {
    try {
      await client.workflow.getHandle(partitionWorkflowId(pipeline, p)).executeUpdate('control', { args: [action] });
      out.push({ partition: p, ok: true, message: `${action} accepted` });
    } catch (e) {
      const cause = (e as { cause?: { message?: string } }).cause?.message;
      out.push({ partition: p, ok: false, message: cause ?? (e as Error).message });
    }
  }
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

function replayOptions() {
  const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  return codePath && existsSync(codePath) ? { workflowBundle: { codePath } } : { workflowsPath: require.resolve('../workflows') };
}

/** Replays a history file, or every run of a workflow id, with the current workflow code. */
export async function replay(client: Client | null, target: string): Promise<{ run: string; ok: boolean; error?: string }[]> {
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
      await Worker.runReplayHistory(replayOptions(), h.history, h.run);
      out.push({ run: h.run, ok: true });
    } catch (e) {
      out.push({ run: h.run, ok: false, error: `${(e as Error).name}: ${(e as Error).message}` });
    }
  }
  return out;
}

export async function exportHistory(client: Client, workflowId: string, runId?: string): Promise<string> {
  return historyToJSON(await client.workflow.getHandle(workflowId, runId).fetchHistory());
}

export interface InDoubt {
  xa: { xid: string; partition: number; epoch: number; kafkaCommitted: boolean; ledger: boolean; action: 'commit' | 'rollback' }[];
  kafka: { topic: string; partition: number; lso: number; highWatermark: number }[];
  /** Epochs whose XA branch committed but whose staged rows are not in the tables yet. */
  staged: { partition: number; epoch: number }[];
}

/** Lists prepared XA branches and partitions held back by open transactions, with the decision each would get. */
export async function inDoubt(deps: { cluster: KafkaCluster; pool: Pool }, spec: PipelineSpec, partitions: number): Promise<InDoubt> {
  const xa: InDoubt['xa'] = [];
  const markersByPartition = new Map<number, Set<number>>();
  for (const x of await recoverXids(deps.pool, `of:${spec.name}:`)) {
    const g = parseGtrid(x.gtrid);
    if (!g || g.pipeline !== spec.name) continue;
    let epochs = markersByPartition.get(g.partition);
    if (!epochs) {
      const from = await earliestOffset(deps.cluster, spec.progressTopic, g.partition);
      epochs = new Set((await committedMarkers(deps.cluster, spec.progressTopic, g.partition, from)).map((m) => m.epoch));
      markersByPartition.set(g.partition, epochs);
    }
    const kafkaCommitted = epochs.has(g.epoch);
    const ledger = (await ledgerRow(deps.pool, spec.name, g.partition, g.epoch)) !== null;
    // The Kafka side is the other participant: if it committed, the decision was commit.
    xa.push({ xid: xidToString(x), partition: g.partition, epoch: g.epoch, kafkaCommitted, ledger, action: kafkaCommitted ? 'commit' : 'rollback' });
  }
  const kafka: InDoubt['kafka'] = [];
  for (const topic of [spec.kafkaSink.topic, spec.progressTopic, spec.deadLetterTopic]) {
    for (let p = 0; p < partitions; p++) {
      const lso = await latestOffset(deps.cluster, topic, p, ISOLATION.READ_COMMITTED);
      const hw = await latestOffset(deps.cluster, topic, p, ISOLATION.READ_UNCOMMITTED);
      if (lso < hw) kafka.push({ topic, partition: p, lso, highWatermark: hw });
    }
  }
  return { xa, kafka, staged: await pendingEpochs(deps.pool, spec.name) };
}

/**
 * Resolves in-doubt transactions of a pipeline that is not running: XA branches are committed
 * when the epoch's Kafka side committed, else rolled back; open Kafka transactions of the
 * pipeline's transactional ids are aborted (InitProducerId), except where MySQL committed an
 * epoch whose Kafka side did not — that needs the pipeline's redo, so it is refused.
 */
export async function resolveInDoubt(deps: { client: Client; cluster: KafkaCluster; pool: Pool }, spec: PipelineSpec, partitions: number): Promise<string[]> {
  for (let p = 0; p < partitions; p++) {
    const wf = await workflowStatus(deps.client, partitionWorkflowId(spec.name, p));
    if (wf?.status === 'RUNNING') {
      throw new Error(`pipeline ${spec.name} is running (partition ${p}); its workflows decide its transactions. Stop it first: onceflow stop ${spec.name}`);
    }
  }
  const parent = await workflowStatus(deps.client, pipelineWorkflowId(spec.name));
  if (parent?.status === 'RUNNING') throw new Error(`pipeline ${spec.name} is running; stop it first: onceflow stop ${spec.name}`);
  const done: string[] = [];
  const found = await inDoubt(deps, spec, partitions);
  for (const b of found.xa) {
    const [gtrid, bqual] = b.xid.split('#') as [string, string];
    if (b.action === 'commit') {
      const r = await commitBranch(deps.pool, { gtrid, bqual }, { pipeline: spec.name, partition: b.partition, epoch: b.epoch });
      done.push(`XA ${b.xid}: ${r === 'committed' ? 'committed (its Kafka side had committed)' : r}`);
    } else {
      done.push(`XA ${b.xid}: ${await rollbackXid(deps.pool, { gtrid, bqual })}`);
    }
  }
  for (const x of await pendingEpochs(deps.pool, spec.name)) {
    if (await applyStaged(deps.pool, { pipeline: spec.name, ...x }, spec.mysqlSink.tables)) done.push(`partition ${x.partition} epoch ${x.epoch}: staged rows applied to the tables`);
  }
  for (let p = 0; p < partitions; p++) {
    const ledger = await lastLedgerRow(deps.pool, spec.name, p);
    const from = await earliestOffset(deps.cluster, spec.progressTopic, p);
    const markers = await committedMarkers(deps.cluster, spec.progressTopic, p, from);
    const lastMarker = markers[markers.length - 1];
    if (ledger && (!lastMarker || lastMarker.epoch < ledger.epoch)) {
      done.push(`partition ${p}: MySQL committed epoch ${ledger.epoch} but Kafka did not — not aborting anything; start the pipeline so it can redo, or inspect by hand`);
      continue;
    }
    for (let slot = 0; slot < spec.kafkaSink.transactionalIdPool; slot++) {
      const tid = transactionalId(spec.name, p, slot);
      const h = await new PreparedTransaction(deps.cluster, tid, spec.kafkaSink.transactionTimeoutMs).begin();
      done.push(`Kafka ${tid}: fenced (producer ${h.producerId} epoch ${h.producerEpoch}); any open transaction of it was aborted`);
    }
  }
  return done;
}
