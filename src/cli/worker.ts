/** `onceflow worker`: a worker until SIGINT/SIGTERM, which let the activities in flight finish first. */
import { onStopSignal } from '../signals';
import { createOnceflowWorker } from '../worker';
import { say, UsageError, type CommandContext } from './context';
import { installWorkerLog, ProgressView } from './progress';

export async function workerCommand({ o, settings, logOptions }: CommandContext): Promise<number> {
  const metricsPort = o['metrics-port'] === undefined ? undefined : Number(o['metrics-port']);
  if (metricsPort !== undefined && (!Number.isInteger(metricsPort) || metricsPort < 0 || metricsPort > 65535))
    throw new UsageError(`--metrics-port must be a port number, got '${o['metrics-port']}'`);
  const taskQueue = (o['task-queue'] as string | undefined) ?? settings.temporal.taskQueue;
  installWorkerLog(logOptions);
  const progress = new ProgressView(say);
  const w = await createOnceflowWorker({
    settings,
    taskQueue,
    observe: progress.observe,
    ...(metricsPort !== undefined ? { metricsPort } : {}),
  });
  const off = onStopSignal((signal) => {
    say(`onceflow worker: ${signal}, stopping: the activities in flight finish first`);
    w.shutdown();
  });
  say(
    `onceflow worker on task queue '${taskQueue}'${w.metricsPort ? `, metrics at http://${settings.metricsHost}:${w.metricsPort}/metrics` : ''}`,
  );
  progress.start();
  try {
    await w.run();
  } finally {
    off();
    progress.stop();
  }
  say('onceflow worker stopped');
  return 0;
}
