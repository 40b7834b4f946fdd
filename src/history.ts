/**
 * Workflow histories: out of the server (`onceflow export-history`), replayed against the current
 * workflow code (`onceflow replay`, replayHistories in the public API), and read for the epochs
 * they committed (the benchmark, the replay tests).
 */
import type { Client } from '@temporalio/client';
import { historyFromJSON, historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { existsSync, readFileSync } from 'node:fs';
import type { Activities } from './activities';

export async function loadHistoryFile(file: string) {
  if (!existsSync(file)) throw new Error(`history file ${file} does not exist`);
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(
      `history file ${file} is not JSON (${(e as Error).message}); export one with 'onceflow export-history <workflow id>' or 'temporal workflow show --output json'`,
    );
  }
  return historyFromJSON(json);
}

function replayOptions(workflowBundle: string | undefined) {
  return workflowBundle
    ? { workflowBundle: { codePath: workflowBundle } }
    : { workflowsPath: require.resolve('./workflows') };
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
  if (target.endsWith('.json') || existsSync(target))
    histories.push({ run: target, history: await loadHistoryFile(target) });
  else {
    if (!client) throw new Error('replaying a workflow id needs the Temporal server');
    for await (const w of client.workflow.list({ query: `WorkflowId = '${target.replace(/'/g, '')}'` })) {
      histories.push({
        run: `${target}/${w.runId}`,
        history: await client.workflow.getHandle(target, w.runId).fetchHistory(),
      });
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

/** The parts of a history event read here and by the benchmark (a subset of temporal.api.history.v1.HistoryEvent). */
export interface HistoryEventLike {
  eventId?: unknown;
  eventTime?: { seconds?: unknown; nanos?: number | null } | null;
  workflowTaskScheduledEventAttributes?: unknown;
  workflowTaskStartedEventAttributes?: { scheduledEventId?: unknown } | null;
  workflowTaskCompletedEventAttributes?: { startedEventId?: unknown } | null;
  activityTaskScheduledEventAttributes?: { activityType?: { name?: string | null } | null } | null;
  activityTaskStartedEventAttributes?: { scheduledEventId?: unknown } | null;
  activityTaskCompletedEventAttributes?: { scheduledEventId?: unknown } | null;
}

/** The activities of the engine (src/workflows/engine.ts, a partition's or a group's) that commit an epoch: advanceMembers commits e (and prepares e+1), commitMembers commits e alone. */
export const COMMIT_ACTIVITIES = ['advanceMembers', 'commitMembers'] as const satisfies readonly (keyof Activities)[];
/** The same in the legacy loops (src/workflows/legacy/, runs recorded before one-engine-v1): a group's, and a partition's since commit-epoch-v1. */
export const LEGACY_COMMIT_ACTIVITIES = [
  'advanceGroup',
  'commitGroup',
  'advanceEpoch',
  'commitEpoch',
] as const satisfies readonly (keyof Activities)[];

/**
 * Committed epochs in workflow histories (one list of events per run): every completed
 * activity of `commits` committed one epoch (a redo after it redoes that same epoch's Kafka
 * side; a failed attempt is retried within the activity, which completes once). With
 * COMMIT_ACTIVITIES over a pipeline's group workflows: its committed group epochs.
 */
export function committedEpochs(runs: HistoryEventLike[][], commits: readonly string[]): number {
  let n = 0;
  for (const run of runs) {
    const types = new Map<string, string>();
    for (const e of run) {
      const s = e.activityTaskScheduledEventAttributes;
      if (s) types.set(String(e.eventId), s.activityType?.name ?? '?');
      const c = e.activityTaskCompletedEventAttributes;
      if (c && commits.includes(types.get(String(c.scheduledEventId)) ?? '')) n++;
    }
  }
  return n;
}
