/**
 * Benchmark child C: one onceflow worker with warm clients on ONCEFLOW_TASK_QUEUE, forwarding
 * every observed activity event (with its time split) to the parent.
 */
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { createOnceflowWorker } from '../../src/worker';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import { send, serveUsage } from './ipc';

async function main() {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const taskQueue = process.env.ONCEFLOW_TASK_QUEUE;
  if (!taskQueue) throw new Error('ONCEFLOW_TASK_QUEUE is not set');
  const bundle = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  // ONCEFLOW_BENCH_EAGER=0: take no activity task eagerly from a workflow-task completion (the run without eager dispatch).
  const eager = process.env.ONCEFLOW_BENCH_EAGER !== '0';
  const h = await createOnceflowWorker({
    taskQueue,
    transforms: compareTransforms(),
    observe: (event) => send({ type: 'event', event }),
    worker: {
      ...(bundle ? { workflowBundle: { codePath: bundle } } : {}),
      ...(eager ? {} : { maxEagerActivityReservationsPerWorkflowTask: 0 }),
    },
  });
  const running = h.run();
  serveUsage(async () => {
    h.shutdown();
    await running;
  });
  send({ type: 'ready' });
  await running;
}

main().catch((e) => {
  send({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exit(1);
});
