/**
 * `onceflow run <config> --transforms <module> [--drain]`: a worker in this process and the
 * pipeline started on its task queue — the one command a project needs to run its pipeline.
 * Without --drain it runs until SIGINT/SIGTERM (the pipeline keeps its state in Temporal and goes
 * on when a worker returns); with --drain it catches up with the source, waits until every
 * partition has ended, and exits.
 */
import type { PartitionResult } from '../workflows/interface';
import { connectClient, controlPipeline, startPipeline, workflowUrl } from '../client';
import { createOnceflowWorker } from '../worker';
import type { PipelineConfig } from '../pipeline-file';
import { loadPipelineConfig } from '../pipeline-file';
import { installWorkerLog, ProgressView } from './progress';
import { say, type CommandContext } from './context';
import { onStopSignal } from '../signals';

export async function runPipeline(
  cfg: PipelineConfig,
  opts: { drain: boolean; progressEveryMs?: number; print: (line: string) => void },
): Promise<PartitionResult[] | null> {
  const progress = new ProgressView(opts.print);
  const worker = await createOnceflowWorker({
    settings: cfg.settings,
    taskQueue: cfg.taskQueue,
    observe: progress.observe,
  });
  const running = worker.run();
  const client = await connectClient(cfg.settings);
  try {
    const handle = await startPipeline(client, cfg.spec, cfg.taskQueue);
    opts.print(
      `pipeline ${cfg.spec.name} running on task queue ${cfg.taskQueue} (workflow ${handle.workflowId})${opts.drain ? '; draining: it ends once caught up with the source' : '; Ctrl-C stops this worker, the pipeline resumes with the next one'}`,
    );
    opts.print(`Web UI: ${workflowUrl(cfg.settings, handle.workflowId)}`);
    progress.start(opts.progressEveryMs);
    let results: PartitionResult[] | null = null;
    if (opts.drain) {
      await controlPipeline(client, cfg.spec.name, 'drain');
      results = (await handle.result()) as PartitionResult[];
    } else {
      await new Promise<void>((resolve) => {
        const off = onStopSignal((signal) => {
          opts.print(
            `${signal}: stopping the worker (the activities in flight finish first); the pipeline resumes with the next one`,
          );
          resolve();
        });
        void running.finally(() => {
          off();
          resolve();
        });
      });
    }
    opts.print(progress.line());
    return results;
  } finally {
    progress.stop();
    try {
      worker.shutdown();
    } catch {
      // the worker had already stopped; `running` says why
    }
    await running.catch(() => undefined);
    await client.connection.close();
    opts.print('worker stopped');
  }
}

/** `onceflow run <config>`: the config's settings, with --transforms (or ONCEFLOW_TRANSFORMS) over its own. */
export async function runCommand({ arg, o, settings, out, logOptions, need }: CommandContext): Promise<number> {
  const cfg = loadPipelineConfig(need(arg, 'config file'));
  installWorkerLog(logOptions);
  const results = await runPipeline(
    {
      ...cfg,
      settings: {
        ...cfg.settings,
        ...(settings.transformsModule ? { transformsModule: settings.transformsModule } : {}),
      },
    },
    { drain: Boolean(o.drain), print: say },
  );
  if (results)
    out(results.map((r) => `partition ${r.partition}: ${r.reason}, offset ${r.state.offset}`).join('\n'), results);
  return 0;
}
