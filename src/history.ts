/**
 * Workflow histories: out of the server (`onceflow export-history`) and replayed against the
 * current workflow code (`onceflow replay`, replayHistories in the public API).
 */
import type { Client } from '@temporalio/client';
import { historyFromJSON, historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { existsSync, readFileSync } from 'node:fs';

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
  return workflowBundle ? { workflowBundle: { codePath: workflowBundle } } : { workflowsPath: require.resolve('./workflows') };
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
