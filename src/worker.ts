/**
 * An onceflow worker: warm Kafka and MySQL clients, the epoch activities, the workflows.
 *
 *   npx tsx src/worker.ts            (or `onceflow worker`)
 *
 * Settings come from the environment (see src/config.ts). Register your own transforms by
 * building a TransformRegistry and calling runWorker({ transforms }).
 */
import { existsSync } from 'node:fs';
import { Kafka, logLevel } from 'kafkajs';
import { createPool } from 'mysql2/promise';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities, type ObservedEvent } from './activities';
import { loadSettings, type Settings } from './config';
import { Faults } from './faults';
import { connectCluster } from './kafka/internals';
import { TransformRegistry } from './transforms/registry';
import { compareTransform } from './transforms/compare';

export function defaultTransforms(): TransformRegistry {
  return new TransformRegistry().register('flink-compare', compareTransform);
}

export interface WorkerHandle {
  worker: Worker;
  /** Runs until shutdown() or a fatal error; closes every client afterwards. */
  run(): Promise<void>;
  shutdown(): void;
}

export async function createOnceflowWorker(opts: {
  settings?: Settings;
  taskQueue?: string;
  transforms?: TransformRegistry;
  faults?: Faults;
  observe?: (e: ObservedEvent) => void;
  worker?: Partial<WorkerOptions>;
} = {}): Promise<WorkerHandle> {
  const settings = opts.settings ?? loadSettings();
  const cluster = await connectCluster({ brokers: settings.kafka.brokers, clientId: `${settings.kafka.clientId}-worker`, logLevel: logLevel.ERROR });
  const kafka = new Kafka({ brokers: settings.kafka.brokers, clientId: `${settings.kafka.clientId}-admin`, logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  const pool = createPool({ ...settings.mysql, connectionLimit: 16, supportBigNumbers: true, bigNumberStrings: false, enableKeepAlive: true });
  const connection = await NativeConnection.connect({ address: settings.temporal.address });
  const bundlePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  const worker = await Worker.create({
    connection,
    namespace: settings.temporal.namespace,
    taskQueue: opts.taskQueue ?? settings.temporal.taskQueue,
    ...(bundlePath && existsSync(bundlePath) ? { workflowBundle: { codePath: bundlePath } } : { workflowsPath: require.resolve('./workflows') }),
    activities: createActivities({
      cluster,
      admin,
      pool,
      transforms: opts.transforms ?? defaultTransforms(),
      faults: opts.faults ?? new Faults(),
      ...(opts.observe ? { observe: opts.observe } : {}),
    }),
    maxConcurrentActivityTaskExecutions: 64,
    ...opts.worker,
  });
  const close = async () => {
    await Promise.allSettled([cluster.disconnect(), admin.disconnect(), pool.end(), connection.close()]);
  };
  return {
    worker,
    async run() {
      try {
        await worker.run();
      } finally {
        await close();
      }
    },
    shutdown: () => worker.shutdown(),
  };
}

if (require.main === module) {
  createOnceflowWorker()
    .then((h) => {
      for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => h.shutdown());
      process.stderr.write(`[onceflow] worker polling task queue '${loadSettings().temporal.taskQueue}'\n`);
      return h.run();
    })
    .catch((e) => {
      process.stderr.write(`[onceflow] worker failed: ${e instanceof Error ? e.message : String(e)}\n`);
      process.exit(1);
    });
}
