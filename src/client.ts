/**
 * Starting and controlling pipelines with the Temporal client.
 */
import {
  Client,
  Connection,
  WorkflowIdConflictPolicy,
  type WorkflowHandleWithFirstExecutionRunId,
} from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { loadSettings, type Settings, type TemporalSettings } from './config';
import type { ControlAction, PartitionStatus } from './protocol';
import { SEARCH_ATTRIBUTES } from './search-attributes';
import { partitionWorkflowId, pipelineWorkflowId, runnerWorkflowId, sourceTopics, type PipelineSpec } from './spec';
import type { PipelineInfo } from './workflows/interface';
import type { pipelineWorkflow } from './workflows/pipeline';

/** Address, TLS and API key of a connection to the settings' Temporal server (client and worker alike). */
export const temporalConnectionOptions = (t: TemporalSettings) => ({
  address: t.address,
  ...(t.tls ? { tls: t.tls } : {}),
  ...(t.apiKey ? { apiKey: t.apiKey } : {}),
});

/**
 * The largest gRPC answer the client takes. @temporalio/client 1.24 means to allow 128 MiB but
 * names the channel argument without its `grpc.` prefix, so grpc-js keeps its 4 MiB default, and a
 * history page of a group workflow over many partitions (4.4 MB at 256) fails RESOURCE_EXHAUSTED.
 */
const MAX_RECEIVE_BYTES = 128 * 1024 * 1024;

/** A Temporal client for the settings' server and namespace. */
export async function connectClient(settings: Settings = loadSettings()): Promise<Client> {
  const connection = await Connection.connect({
    ...temporalConnectionOptions(settings.temporal),
    connectTimeout: '5s',
    channelArgs: { 'grpc.max_receive_message_length': MAX_RECEIVE_BYTES },
  });
  return new Client({ connection, namespace: settings.temporal.namespace });
}

/**
 * Starts the pipeline's workflow; starting a running pipeline again returns the running one and
 * starts again its partitions that halted (restartHaltedSignal in src/workflows/pipeline.ts).
 */
export async function startPipeline(
  client: Client,
  spec: PipelineSpec,
  taskQueue: string,
): Promise<WorkflowHandleWithFirstExecutionRunId<typeof pipelineWorkflow>> {
  const handle = await client.workflow.start('pipelineWorkflow', {
    taskQueue,
    workflowId: pipelineWorkflowId(spec.name),
    args: [spec],
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
    typedSearchAttributes: [{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }],
    memo: {
      pipeline: spec.name,
      source: sourceTopics(spec).join(','),
      transform: spec.transform,
      kafkaSink: spec.kafkaSink.topic,
      tables: spec.mysqlSink.tables.map((t) => t.name).join(','),
      epoch: spec.epoch,
    },
  });
  // A pipeline that ended meanwhile has nothing to restart: the next start begins a new run.
  await handle.signal('restartHalted').catch(() => undefined);
  return handle;
}

/** The workflow's page in the Temporal Web UI of the settings. */
export const workflowUrl = (settings: Settings, workflowId: string) =>
  `${settings.temporal.webUi}/namespaces/${encodeURIComponent(settings.temporal.namespace)}/workflows/${encodeURIComponent(workflowId)}`;

/** Sends pause, resume, drain or stop to a running pipeline; its partitions act at their next epoch boundary. */
export async function controlPipeline(client: Client, pipeline: string, action: ControlAction): Promise<void> {
  await client.workflow.getHandle(pipelineWorkflowId(pipeline)).signal('control', action);
}

/**
 * A source partition's status, also in a pipeline with partition groups (its group's workflow
 * answers for it). Given only the pipeline's name, the pipeline workflow says which workflow runs
 * the partition (runs that predate that answer: the partition's own).
 */
export async function partitionStatus(
  client: Client,
  pipeline: string | PipelineSpec,
  partition: number,
): Promise<PartitionStatus> {
  let id: string;
  if (typeof pipeline !== 'string') id = runnerWorkflowId(pipeline, partition);
  else {
    const info = await client.workflow
      .getHandle(pipelineWorkflowId(pipeline))
      .query<PipelineInfo>('info')
      .catch(() => undefined);
    id = info?.sources?.find((s) => s.id === partition)?.workflowId ?? partitionWorkflowId(pipeline, partition);
  }
  return client.workflow.getHandle(id).query<PartitionStatus, [number]>('status', partition);
}

/** The definition a pipeline was started with, read from its workflow history (no config file needed). */
export async function pipelineSpecOf(client: Client, pipeline: string): Promise<PipelineSpec> {
  let history;
  try {
    history = await client.workflow.getHandle(pipelineWorkflowId(pipeline)).fetchHistory();
  } catch (e) {
    throw new Error(
      `no pipeline '${pipeline}' on this Temporal server (workflow ${pipelineWorkflowId(pipeline)}): ${e instanceof Error ? e.message : String(e)}`,
    );
  }
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  if (!payload) throw new Error(`workflow ${pipelineWorkflowId(pipeline)} has no start input`);
  return defaultPayloadConverter.fromPayload<PipelineSpec>(payload);
}
