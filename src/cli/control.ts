/**
 * `onceflow start`, `pause`, `resume` and `stop`: starting a pipeline (and following it on a
 * terminal) and the control updates sent to its partitions (src/cli/partitions.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { controlPipeline, pipelineSpecOf, startPipeline, workflowUrl } from '../client';
import type { Connections } from '../connections';
import { errorMessage } from '../errors';
import { loadPipelineConfig } from '../pipeline-file';
import { onStopSignal } from '../signals';
import { pipelineWorkflowId, type PipelineSpec } from '../spec';
import type { PartitionResult } from '../workflows/interface';
import { withServices, type CommandContext } from './context';
import { controlPartitions, pipelinePartitionIds } from './partitions';
import { pipelineStatus, type PartitionRow } from './status';

/** `onceflow start <config>`: on a terminal it then follows the pipeline (not with --json or --detach). */
export function startCommand({ arg, o, settings, out, io, need }: CommandContext): Promise<number> {
  const cfg = loadPipelineConfig(need(arg, 'config file'));
  return withServices(cfg.settings, async (s) => {
    const h = await startPipeline(s.client, cfg.spec, cfg.taskQueue);
    const ui = workflowUrl(cfg.settings, h.workflowId);
    const worker = `onceflow worker --task-queue ${cfg.taskQueue} --transforms ${settings.transformsModule ?? '<module exporting transforms>'}`;
    out(
      `started pipeline ${cfg.spec.name}: workflow ${h.workflowId} on task queue ${cfg.taskQueue}\nWeb UI: ${ui}\nworkers: ${worker}`,
      {
        pipeline: cfg.spec.name,
        workflowId: h.workflowId,
        runId: h.firstExecutionRunId,
        taskQueue: cfg.taskQueue,
        ui,
        worker,
      },
    );
    // On a terminal: follow the pipeline until Ctrl-C (it runs on without this command).
    if (!o.json && !o.detach && process.stdout.isTTY) await followPipeline(s, cfg.spec, io.stderr);
    return 0;
  });
}

/** A summary line of the pipeline every 5 s until SIGINT/SIGTERM or the pipeline ends. */
async function followPipeline(s: Connections, spec: PipelineSpec, write: (line: string) => void): Promise<void> {
  let stop = false;
  const off = onStopSignal(() => (stop = true));
  const closed = s.client.workflow
    .getHandle(pipelineWorkflowId(spec.name))
    .result()
    .then(
      () => 'ended',
      (e: unknown) => `failed: ${errorMessage(e)}`,
    );
  let ended: string | undefined;
  void closed.then((r) => (ended = r));
  write(`following ${spec.name} (Ctrl-C stops following; the pipeline runs on)\n`);
  try {
    while (!stop && !ended) {
      const rows = await pipelineStatus(s, spec, 0);
      const sum = (f: (r: PartitionRow) => number | null) => rows.reduce((a, r) => a + (f(r) ?? 0), 0);
      const stalled = rows.filter((r) => r.stalled).map((r) => r.label);
      write(
        `${new Date().toISOString().slice(11, 19)}  partitions ${rows.length}  committed ${sum((r) => r.committedOffset)}  lag ${sum((r) => r.lag)}` +
          `  retrying ${rows.filter((r) => r.activity).length}${stalled.length ? `  STALLED ${stalled.join(', ')} (onceflow status ${spec.name})` : ''}\n`,
      );
      for (let i = 0; i < 50 && !stop && !ended; i++) await sleep(100);
    }
    if (ended) write(`pipeline ${spec.name} ${ended}\n`);
  } finally {
    off();
  }
}

/** `onceflow pause|resume <pipeline>`: exit 1 if a partition rejects it. */
export function pauseResumeCommand({ cmd, arg, settings, out, need }: CommandContext): Promise<number> {
  const action = cmd === 'pause' ? 'pause' : 'resume';
  return withServices(settings, async (s) => {
    const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
    const res = await controlPartitions(s.client, spec, await pipelinePartitionIds(s, spec), action);
    out(res.map((r) => `partition ${r.partition}: ${r.ok ? 'ok' : 'rejected'} — ${r.message}`).join('\n'), res);
    return res.every((r) => r.ok) ? 0 : 1;
  });
}

/** `onceflow stop <pipeline> [--drain] [--wait]`: with --wait, the lag of each partition every second until all have ended. */
export function stopCommand({ arg, o, settings, out, io, need }: CommandContext): Promise<number> {
  return withServices(settings, async (s) => {
    const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
    const partitions = await pipelinePartitionIds(s, spec);
    const action = o.drain ? 'drain' : 'stop';
    const res = await controlPartitions(s.client, spec, partitions, action);
    if (res.some((r) => !r.ok)) await controlPipeline(s.client, spec.name, action); // children not started yet: via the parent
    if (!o.wait) {
      out(res.map((r) => `partition ${r.partition}: ${r.ok ? `${action} accepted` : r.message}`).join('\n'), res);
      return 0;
    }
    const handle = s.client.workflow.getHandle(pipelineWorkflowId(spec.name));
    const done = handle.result() as Promise<PartitionResult[]>;
    let finished = false;
    void done.finally(() => (finished = true)).catch(() => undefined);
    while (!finished) {
      await Promise.race([done.catch(() => undefined), sleep(1000)]);
      if (finished || o.json) continue;
      const rows = await pipelineStatus(s, spec, partitions.length);
      io.stderr(`  ${action}: ${rows.map((r) => `${r.label} lag ${r.lag ?? '?'}`).join(', ')}\n`);
    }
    const results = await done;
    out(
      results
        .map(
          (r) =>
            `partition ${r.partition}: ${r.reason} after ${r.state.committedEpochs} epochs in the last run, offset ${r.state.offset}`,
        )
        .join('\n'),
      results,
    );
    return 0;
  });
}
