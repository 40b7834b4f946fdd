/**
 * A pipeline: describes the source, then runs one partition workflow per source partition and
 * forwards control (pause, resume, drain, stop) to them. Adds no coordination of its own: each
 * partition's epochs are coordinated by its own workflow history.
 */
import {
  ParentClosePolicy,
  defineQuery,
  defineSignal,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  startChild,
  upsertSearchAttributes,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { NON_RETRYABLE_TYPES } from '../errors';
import { applyControl, type ControlAction } from '../protocol';
import { SEARCH_ATTRIBUTES } from '../search-attributes';
import { partitionWorkflowId, type PipelineSpec } from '../spec';
import { controlSignal, partitionWorkflow, type PartitionResult } from './partition';

export const pipelineInfoQuery = defineQuery<{ pipeline: string; partitions: number; workflowIds: string[]; lastControl?: ControlAction }>('info');
export const pipelineControlSignal = defineSignal<[ControlAction]>('control');

const { describeSource } = proxyActivities<Activities>({
  startToCloseTimeout: '120s',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '500ms', maximumInterval: '5s', nonRetryableErrorTypes: [...NON_RETRYABLE_TYPES] },
});

export async function pipelineWorkflow(spec: PipelineSpec): Promise<PartitionResult[]> {
  let partitions = 0;
  let workflowIds: string[] = [];
  let lastControl: ControlAction | undefined;
  const pendingControls: ControlAction[] = [];
  setHandler(pipelineInfoQuery, () => ({ pipeline: spec.name, partitions, workflowIds, lastControl }));
  setHandler(pipelineControlSignal, async (action) => {
    lastControl = action;
    if (workflowIds.length === 0) {
      pendingControls.push(action);
      return;
    }
    await Promise.all(workflowIds.map((id) => getExternalWorkflowHandle(id).signal(controlSignal, action).catch(() => undefined)));
  });
  upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }]);

  ({ partitions } = await describeSource(spec));
  const children: ChildWorkflowHandle<typeof partitionWorkflow>[] = [];
  for (let partition = 0; partition < partitions; partition++) {
    children.push(
      await startChild(partitionWorkflow, {
        workflowId: partitionWorkflowId(spec.name, partition),
        args: [{ spec, partition, control: pendingControls.reduce(applyControl, { paused: false, drain: false, stop: false }) }],
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        typedSearchAttributes: [
          { key: SEARCH_ATTRIBUTES.pipeline, value: spec.name },
          { key: SEARCH_ATTRIBUTES.partition, value: partition },
        ],
        memo: { pipeline: spec.name, partition, source: spec.source.topic, kafkaSink: spec.kafkaSink.topic, tables: spec.mysqlSink.tables.map((t) => t.name).join(',') },
      }),
    );
  }
  workflowIds = children.map((c) => c.workflowId);
  return Promise.all(children.map((c) => c.result()));
}
