/**
 * A campaign's stage: the isolated stack brought up, the clients the harness reads it with
 * (never through a proxy), the campaign's pipeline and its topics, and the supervised worker
 * processes. tools/chaos/campaign.ts drives a campaign on it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { createPool, type Pool } from 'mysql2/promise';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import { connectClient } from '../../src/client';
import { loadSettings, toolPaths, type Settings } from '../../src/config';
import { kafkaClientConfig } from '../../src/kafka/client-config';
import { connectCluster, type KafkaCluster } from '../../src/kafka/internals';
import { createTopicsReady } from '../../src/kafka/topics';
import { PROGRESS_TOPIC_CONFIG } from '../../src/activities/setup';
import { groupOf, runnerWorkflowId, type PipelineSpec } from '../../src/spec';
import type { GroupStatus } from '../../src/workflows/interface';
import { compareSpec, resetPipeline } from '../../examples/flink-compare/scenario';
import { services, servicesEnv, stackPorts, startProxies, WorkerSupervisor, type StackOptions } from './stack';
import type { CampaignOptions } from './types';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface CampaignEnv {
  o: CampaignOptions;
  log: (line: string) => void;
  /** Kafka nodes of the stack (1: single node, reached through the per-worker proxies). */
  nodes: number;
  stack: StackOptions;
  ports: ReturnType<typeof stackPorts>;
  logDir: string;
  /** The fault rules file the workers read (tools/chaos/inject.ts arms it). */
  faultsFile: string;
  envFile: string;
  settings: Settings;
  bundle: string;
  proxies: ReturnType<typeof startProxies>;
  admin: Admin;
  pool: Pool;
  cluster: KafkaCluster;
  client: Awaited<ReturnType<typeof connectClient>>;
  kafkaLibsDir: string | undefined;
  name: string;
  spec: PipelineSpec;
  taskQueue: string;
  grouped: boolean;
  /** The source partitions of group g (grouped pipelines). */
  membersOf: (g: number) => number[];
  /** The workflows that run the pipeline's partitions: one per group, or one per partition. */
  runnerIds: string[];
  /** A group's own status (its group epoch counter, in-flight epochs), from its workflow. */
  groupStatus: (g: number) => Promise<GroupStatus>;
  closeClients: () => Promise<void>;
}

/** Brings up the stack, connects, and resets the campaign's pipeline (its topics created ahead on a cluster). */
export async function openCampaign(o: CampaignOptions): Promise<CampaignEnv> {
  const log = o.log;
  const nodes = o.kafkaNodes ?? 1;
  const stack: StackOptions = {
    runDir: o.runDir,
    portBase: o.portBase,
    workers: o.workers,
    ...(nodes > 1 ? { kafkaNodes: nodes, kafkaControllers: o.kafkaControllers ?? 0 } : {}),
  };
  const ports = stackPorts(stack);
  const logDir = join(o.runDir, 'campaign');
  mkdirSync(logDir, { recursive: true });
  const faultsFile = join(logDir, 'faults.rules');
  writeFileSync(faultsFile, '');

  log(
    `seed ${o.seed}: bringing up the isolated stack in ${o.runDir} (ports ${ports.temporal}, ${ports.kafka}, ${ports.mysql})`,
  );
  await services(stack, ['up']);
  const envFile = join(o.runDir, 'services.env');
  const settings = loadSettings({ ONCEFLOW_SERVICES_ENV: envFile });
  // Started by the driver (the workers are their only users), which closes them at its end.
  const proxies = startProxies(stack);
  const bundle = await workflowBundle(logDir);

  const kafka = new Kafka({ ...kafkaClientConfig(settings.kafka, 'onceflow-chaos'), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const pool = createPool({ ...settings.mysql, connectionLimit: 4, dateStrings: true });
  const cluster = await connectCluster({
    ...kafkaClientConfig(settings.kafka, 'onceflow-chaos'),
    logLevel: logLevel.NOTHING,
  });
  const kafkaLibsDir = toolPaths({ ONCEFLOW_SERVICES_ENV: envFile }).kafkaLibs;
  const client = await connectClient(settings);

  const name = `chaos-${o.seed}-${Date.now().toString(36)}`;
  const spec = campaignSpec(o, name);
  await resetPipeline(admin, pool, spec, o.partitions);
  if (nodes > 1) await createTopicsAhead(admin, spec, o.partitions);
  return {
    o,
    log,
    nodes,
    stack,
    ports,
    logDir,
    faultsFile,
    envFile,
    settings,
    bundle,
    proxies,
    admin,
    pool,
    cluster,
    client,
    kafkaLibsDir,
    name,
    spec,
    taskQueue: `${name}-tq`,
    grouped: spec.parallelism !== undefined,
    membersOf: (g) => Array.from({ length: o.partitions }, (_, p) => p).filter((p) => groupOf(spec, p) === g),
    runnerIds: [...new Set(Array.from({ length: o.partitions }, (_, p) => runnerWorkflowId(spec, p)))],
    groupStatus: (g) => client.workflow.getHandle(runnerWorkflowId(spec, g)).query<GroupStatus, []>('status'),
    closeClients: async () =>
      void (await Promise.allSettled([
        admin.disconnect(),
        pool.end(),
        cluster.disconnect(),
        client.connection.close(),
      ])),
  };
}

/** ONCEFLOW_WORKFLOW_BUNDLE, or the workflow code bundled into the campaign's log directory. */
async function workflowBundle(logDir: string): Promise<string> {
  let bundle = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  if (!bundle) {
    bundle = join(logDir, 'workflow-bundle.js');
    const { code } = await bundleWorkflowCode({
      workflowsPath: require.resolve('../../src/workflows'),
      logger: new DefaultLogger('WARN'),
    });
    writeFileSync(bundle, code);
  }
  return bundle;
}

function campaignSpec(o: CampaignOptions, name: string): PipelineSpec {
  return compareSpec({
    name,
    source: { topic: `${name}.in` },
    kafkaSink: { topic: `${name}.out`, transactionTimeoutMs: o.transactionTimeoutMs },
    epoch: { maxRecords: o.maxRecords, maxWaitMs: 1000 },
    transformOptions: {
      table: `t_${name.replace(/[^a-z0-9]/g, '_')}`,
      compareFailAfter: o.compareFailAfter,
      compareFailEveryNthEpoch: o.compareFailEveryNthEpoch,
    },
    ...(o.parallelism ? { parallelism: o.parallelism } : {}),
    // Poison records are part of the data under test, not a transform bug: a small epoch of a
    // group can hold one from each member, so the budget is explicit (design.md §1.1).
    deadLetter: { maxRatio: 0.1 },
  });
}

/**
 * A cluster: the pipeline's other topics are created here, as setup would create them, and every
 * node is given time to learn them before the pipeline starts — setup creates missing topics and
 * then lists topics through whichever node it asks; a node that has not caught up answers
 * without them, which setup takes for a configuration error ('has no partitions', seen with
 * seed 20261202; a setup race on clusters, reported, not fixed here).
 */
async function createTopicsAhead(admin: Admin, spec: PipelineSpec, partitions: number): Promise<void> {
  await createTopicsReady(admin, [
    { topic: spec.kafkaSink.topic, numPartitions: partitions, replicationFactor: -1 },
    { topic: spec.deadLetterTopic, numPartitions: partitions, replicationFactor: -1 },
    {
      topic: spec.progressTopic,
      numPartitions: partitions,
      replicationFactor: -1,
      configEntries: PROGRESS_TOPIC_CONFIG,
    },
  ]);
  await sleep(5000);
}

/** The campaign's worker processes, each reaching Kafka (one node) and MySQL through its own proxy and reading the fault rules file. */
export function superviseWorkers(env: CampaignEnv, onLine: (worker: number, line: string) => void): WorkerSupervisor {
  const { stack, ports } = env;
  return new WorkerSupervisor(
    env.o.workers,
    (i) => ({
      ...servicesEnv(stack),
      ONCEFLOW_SERVICES_ENV: env.envFile,
      ONCEFLOW_TASK_QUEUE: env.taskQueue,
      // A cluster's workers reach its nodes directly (brokers from services.env); one node reaches worker i through its proxy.
      ...(env.nodes > 1 ? {} : { ONCEFLOW_KAFKA_BROKERS: `127.0.0.1:${ports.kafkaProxy(i)}` }),
      ONCEFLOW_MYSQL_PORT: String(ports.mysqlProxy(i)),
      ONCEFLOW_FAULTS_FILE: env.faultsFile,
      ONCEFLOW_WORKFLOW_BUNDLE: env.bundle,
    }),
    env.logDir,
    onLine,
  );
}
