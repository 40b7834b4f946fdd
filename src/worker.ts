/**
 * An onceflow worker: warm Kafka and MySQL clients, the epoch activities, the workflows.
 * This file only wires; `onceflow worker --transforms <module>` runs it from the command line.
 *
 *   const w = await createOnceflowWorker({ transforms });   // your TransformRegistry
 *   await w.run();
 *
 * Settings come from src/config/ (the environment and the services file).
 */
import type { Server } from 'node:http';
import { logLevel, type Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities } from './activities';
import { DecidedCommits } from './activities/decided';
import type { ObservedEvent } from './activities/observe';
import { temporalConnectionOptions } from './client';
import { loadSettings, type Settings } from './config';
import { openKafka, openPool, unreachable } from './connections';
import { Faults } from './faults';
import type { KafkaCluster } from './kafka/internals';
import { serveMetrics, WorkerMetrics } from './metrics';
import { loadTransforms } from './transforms/load';
import { TransformRegistry } from './transforms/registry';
import { onStopSignal } from './signals';

export interface WorkerHandle {
  worker: Worker;
  metrics: WorkerMetrics;
  /** Port of the Prometheus endpoint (http://<settings.metricsHost>:<port>/metrics), if enabled. */
  metricsPort?: number;
  /** Runs until shutdown() or a fatal error; closes every client afterwards. */
  run(): Promise<void>;
  shutdown(): void;
}

/** The transforms a worker runs: given, else from settings.transformsModule, else none. */
export function transformsOf(settings: Settings, given?: TransformRegistry): TransformRegistry {
  return (
    given ??
    (settings.transformsModule
      ? loadTransforms(settings.transformsModule, '--transforms (or ONCEFLOW_TRANSFORMS)')
      : new TransformRegistry())
  );
}

/**
 * Creates a worker for onceflow's workflows and activities on one task queue.
 *
 * @param opts.transforms - the transforms your pipelines name (default: the module in
 *   `settings.transformsModule`, i.e. `--transforms` / ONCEFLOW_TRANSFORMS)
 * @param opts.settings - service addresses and credentials (default: {@link loadSettings})
 * @param opts.taskQueue - default: `settings.temporal.taskQueue`
 * @param opts.worker - Temporal WorkerOptions that override onceflow's
 * @returns a handle: `run()` until `shutdown()`; both close every client the worker opened
 */
export async function createOnceflowWorker(
  opts: {
    settings?: Settings;
    taskQueue?: string;
    transforms?: TransformRegistry;
    faults?: Faults;
    observe?: (e: ObservedEvent) => void;
    /** Serve Prometheus metrics on this port (0 = a free port); default settings.metricsPort, off when 0. */
    metricsPort?: number;
    worker?: Partial<WorkerOptions>;
  } = {},
): Promise<WorkerHandle> {
  const settings = opts.settings ?? loadSettings();
  const transforms = transformsOf(settings, opts.transforms);
  const metrics = new WorkerMetrics();
  const metricsPort = opts.metricsPort ?? (settings.metricsPort > 0 ? settings.metricsPort : undefined);
  const metricsServer =
    metricsPort === undefined ? undefined : await serveMetrics(metrics, metricsPort, settings.metricsHost);
  const opened: (() => unknown)[] = [() => metricsServer?.close()];
  const close = async () => void (await Promise.allSettled(opened.map(async (c) => c())));
  // Each service is reached (and logged in to) before the worker polls, so a wrong address,
  // password or certificate stops it at once with one line saying which and what to do.
  try {
    const { admin, cluster } = await openKafka(settings, `${settings.kafka.clientId}-worker`, logLevel.ERROR);
    opened.push(
      () => cluster.disconnect(),
      () => admin.disconnect(),
    );
    const pool = await openPool(settings, {
      connectionLimit: 16,
      supportBigNumbers: true,
      bigNumberStrings: false,
      enableKeepAlive: true,
    });
    opened.push(() => pool.end());
    const connection = await NativeConnection.connect(temporalConnectionOptions(settings.temporal)).catch(
      unreachable('Temporal', settings),
    );
    opened.push(() => connection.close());
    return await wire(opts, settings, { transforms, admin, cluster, pool, connection, metrics, metricsServer, close });
  } catch (e) {
    await close();
    throw e;
  }
}

/** How long a workflow task waits for its sticky worker (see wire). */
export const STICKY_SCHEDULE_TO_START = '3s';

async function wire(
  opts: Parameters<typeof createOnceflowWorker>[0] & object,
  settings: Settings,
  {
    transforms,
    admin,
    cluster,
    pool,
    connection,
    metrics,
    metricsServer,
    close,
  }: {
    transforms: TransformRegistry;
    admin: Admin;
    cluster: KafkaCluster;
    pool: Pool;
    connection: NativeConnection;
    metrics: WorkerMetrics;
    metricsServer?: Server;
    close: () => Promise<void>;
  },
): Promise<WorkerHandle> {
  const decided = new DecidedCommits();
  const worker = await Worker.create({
    connection,
    namespace: settings.temporal.namespace,
    taskQueue: opts.taskQueue ?? settings.temporal.taskQueue,
    ...(settings.workflowBundle
      ? { workflowBundle: { codePath: settings.workflowBundle } }
      : { workflowsPath: require.resolve('./workflows') }),
    activities: createActivities({
      decided,
      cluster,
      admin,
      pool,
      transforms,
      replicationFactor: settings.kafka.replicationFactor,
      faults: opts.faults ?? Faults.fromSettings(settings.faults),
      observe: (e) => {
        metrics.observe(e);
        opts.observe?.(e);
      },
    }),
    maxConcurrentActivityTaskExecutions: settings.maxConcurrentActivities,
    // A workflow task waits this long for the worker that ran the workflow last (its cache)
    // before any worker may take it: when that worker is frozen, the partition waits this long
    // (the default, 10 s, was half of the liveness budget; docs/deploy.md §7.3).
    stickyQueueScheduleToStartTimeout: STICKY_SCHEDULE_TO_START,
    ...opts.worker,
  });
  const address = metricsServer?.address();
  return {
    worker,
    metrics,
    ...(address && typeof address === 'object' ? { metricsPort: address.port } : {}),
    async run() {
      try {
        await worker.run();
      } finally {
        // Commits begun by activities that completed themselves (src/activities/decided.ts) end first.
        await decided.drain();
        await close();
      }
    },
    shutdown: () => worker.shutdown(),
  };
}

if (require.main === module) {
  createOnceflowWorker()
    .then((h) => {
      onStopSignal(() => h.shutdown());
      process.stderr.write(`[onceflow] worker polling task queue '${loadSettings().temporal.taskQueue}'\n`);
      // Exit once stopped and closed, as the CLI's `worker` does: kafkajs's disconnect ends and
      // unrefs each socket, but a TLS socket caught mid-connect has been seen to stay referenced
      // and keep a stopped worker alive (test/secure.test.ts caught it).
      return h.run().then(() => process.exit(0));
    })
    .catch((e) => {
      process.stderr.write(`[onceflow] worker failed: ${e instanceof Error ? e.message : String(e)}\n`);
      process.exit(1);
    });
}
