/**
 * Benchmark child C: one onceflow worker with warm clients on ONCEFLOW_TASK_QUEUE, forwarding
 * every observed activity event (with its time split) to the parent.
 */
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { createOnceflowWorker } from '../../src/worker';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import { send, serveUsage } from './ipc';

/** A port nothing listens on now. */
const freePort = () =>
  new Promise<number>((res, rej) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => res(port));
    });
    srv.on('error', rej);
  });

async function main() {
  // BENCH_SDK_METRICS=<dir>: the Temporal SDK's own metrics (workflow task and request latencies
  // as the worker sees them), scraped as the worker stops into <dir>/worker-<pid>.prom.
  const dir = process.env.BENCH_SDK_METRICS;
  const sdkMetrics = dir ? { dir, address: `127.0.0.1:${await freePort()}` } : undefined;
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    ...(sdkMetrics ? { telemetryOptions: { metrics: { prometheus: { bindAddress: sdkMetrics.address } } } } : {}),
  });
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
    try {
      if (sdkMetrics)
        writeFileSync(
          join(sdkMetrics.dir, `worker-${process.pid}.prom`),
          await (await fetch(`http://${sdkMetrics.address}/metrics`)).text(),
        );
    } finally {
      h.shutdown();
      await running;
    }
  });
  send({ type: 'ready' });
  await running;
}

main().catch((e) => {
  send({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exit(1);
});
