/**
 * onceflow's public API: exactly-once pipelines from Kafka into Kafka and MySQL, each checkpoint
 * epoch a step of a Temporal workflow.
 *
 * - Define a transform ({@link defineTransform}) and register it ({@link TransformRegistry}).
 * - Define a pipeline in code ({@link definePipeline}) or read a config file ({@link loadPipelineConfig}).
 * - Run a worker with your transforms ({@link createOnceflowWorker}); its `worker` option takes
 *   any Temporal `WorkerOptions`, e.g. a prebuilt bundle of the `onceflow/workflows` entry.
 * - Start and control a pipeline with a Temporal `Client` ({@link startPipeline}, {@link controlPipeline}).
 * - Read and write Avro, Protobuf or JSON Schema records through a schema registry
 *   ({@link withSchemaRegistry}).
 * - Prove a run exactly once ({@link verifyPipeline}) and replay histories against this code
 *   ({@link replayHistories}).
 *
 * Everything not exported here is internal and may change in any release.
 *
 * @packageDocumentation
 */
export { defineTransform, TransformRegistry } from './transforms/registry';
export type { Transform, TransformContext, TransformResult, SourceRecord, OutputRecord } from './transforms/registry';
export type { RowOp, RowValue, SqlValue } from './mysql/sink';
export { definePipeline } from './schema/pipeline';
export { SPEC_DEFAULTS, pipelineWorkflowId, partitionWorkflowId } from './spec';
export type { PipelineSpec, PipelineInput, TableSpec, EpochBounds, DeadLetterBudget } from './spec';
export { loadPipelineConfig, type PipelineConfig } from './pipeline-file';
export { loadSettings, type Settings } from './config';
export { createOnceflowWorker, type WorkerHandle } from './worker';
export { connectClient, startPipeline, controlPipeline, partitionStatus, pipelineSpecOf } from './client';
export type { ControlAction, PartitionStatus } from './protocol';
export { openConnections, type Connections } from './connections';
export { verifyPipeline, type VerifyReport, type Check } from './verify';
export { replay as replayHistories } from './history';
export { OnceflowError, ConfigError, ValidationError, MissingTransform, PipelineHalted } from './errors';
export { withSchemaRegistry, UndecodableRecord, SchemaRegistryUnavailable } from './serde/schema-registry';
export type {
  SchemaRegistryClient,
  SchemaRegistryOptions,
  SchemaRef,
  SchemaRegistryTransform,
  DecodedRecord,
  EncodableOutputRecord,
  EncodableResult,
} from './serde/schema-registry';
