/**
 * LEGACY — the pipeline workflow before `source-discovery-v1` (src/workflows/pipeline.ts), kept
 * unchanged so that histories recorded before the patch replay. Do not change what it schedules.
 *
 * Describes the source once, starts one partition workflow per source partition and awaits them
 * all; control signals are forwarded to every child.
 */
import {
  ParentClosePolicy,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  startChild,
  upsertSearchAttributes,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { applyControl, type ControlAction } from '../../protocol';
import { SEARCH_ATTRIBUTES } from '../../search-attributes';
import { partitionWorkflowId, type PipelineSpec } from '../../spec';
import { PIPELINE_ACTIVITY_OPTIONS } from '../activity-options';
import { controlSignal, pipelineInfoQuery, type PartitionResult } from '../interface';
import { partitionWorkflow } from '../partition';

const { describeSource } = proxyActivities<Activities>(PIPELINE_ACTIVITY_OPTIONS);

export async function startOncePipeline(spec: PipelineSpec): Promise<PartitionResult[]> {
  let partitions = 0;
  let workflowIds: string[] = [];
  let lastControl: ControlAction | undefined;
  const pendingControls: ControlAction[] = [];
  setHandler(pipelineInfoQuery, () => ({ pipeline: spec.name, partitions, workflowIds, lastControl }));
  setHandler(controlSignal, async (action) => {
    lastControl = action;
    if (workflowIds.length === 0) {
      pendingControls.push(action);
      return;
    }
    await Promise.all(
      workflowIds.map((id) =>
        getExternalWorkflowHandle(id)
          .signal(controlSignal, action)
          .catch(() => undefined),
      ),
    );
  });
  upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }]);

  ({ partitions } = await describeSource(spec));
  const children: ChildWorkflowHandle<typeof partitionWorkflow>[] = [];
  for (let partition = 0; partition < partitions; partition++) {
    children.push(
      await startChild(partitionWorkflow, {
        workflowId: partitionWorkflowId(spec.name, partition),
        args: [
          {
            spec,
            partition,
            control: pendingControls.reduce(applyControl, { paused: false, drain: false, stop: false }),
          },
        ],
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        typedSearchAttributes: [
          { key: SEARCH_ATTRIBUTES.pipeline, value: spec.name },
          { key: SEARCH_ATTRIBUTES.partition, value: partition },
        ],
        memo: {
          pipeline: spec.name,
          partition,
          source: spec.source.topic,
          kafkaSink: spec.kafkaSink.topic,
          tables: spec.mysqlSink.tables.map((t) => t.name).join(','),
        },
      }),
    );
  }
  workflowIds = children.map((c) => c.workflowId);
  return Promise.all(children.map((c) => c.result()));
}
