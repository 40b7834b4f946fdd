/**
 * An ungrouped source partition of a pipeline: the engine (src/workflows/engine.ts) over a group
 * of one. Runs recorded before ONE_ENGINE_PATCH — and runs without a SourceRef, started before
 * source discovery — replay the legacy loop (src/workflows/legacy/partition.ts).
 */
import {
  CancellationScope,
  ContinueAsNew,
  continueAsNew,
  getExternalWorkflowHandle,
  patched,
} from '@temporalio/workflow';
import type { PartitionInput } from '../protocol';
import { pipelineWorkflowId } from '../spec';
import { partitionState, runEngine } from './engine';
import { failureOf, partitionEndedSignal, type PartitionEnd, type PartitionResult } from './interface';
import { runPartition } from './legacy/partition';

export * from './interface';

/**
 * One engine for ungrouped partitions and partition groups: runs recorded before it replay the
 * loops they ran (src/workflows/legacy/), and continue as new into the engine.
 */
export const ONE_ENGINE_PATCH = 'one-engine-v1';

/**
 * A partition workflow started by a discovering pipeline (input.source set) tells the pipeline
 * workflow how it ended, by a signal to the pipeline's workflow id: the pipeline may have
 * continued as new since it started this child, and a new run cannot await the result of a
 * child of an earlier run (src/workflows/pipeline.ts). Runs without a SourceRef — every run
 * recorded before — issue no such command, so their histories replay unchanged.
 */
export async function partitionWorkflow(input: PartitionInput): Promise<PartitionResult> {
  if (!input.source) return runPartition(input);
  const { spec, partition, source } = input;
  const tell = (end: PartitionEnd) =>
    CancellationScope.nonCancellable(() =>
      getExternalWorkflowHandle(pipelineWorkflowId(spec.name))
        .signal(partitionEndedSignal, end)
        .catch(() => undefined),
    );
  let result: PartitionResult;
  try {
    if (patched(ONE_ENGINE_PATCH)) {
      const [r] = await runEngine(
        {
          spec,
          group: partition,
          solo: true,
          members: [{ id: partition, source }],
          ...(input.state ? { carried: { members: [{ ...input.state, id: partition }] } } : {}),
          ...(input.control ? { control: input.control } : {}),
        },
        {
          continueAsNew: (c) =>
            continueAsNew<typeof partitionWorkflow>({
              spec,
              partition,
              source,
              state: partitionState(c.members[0]!),
              control: c.control,
            }),
        },
      );
      result = r!;
    } else {
      result = await runPartition(input);
    }
  } catch (e) {
    if (!(e instanceof ContinueAsNew)) await tell({ partition, ...failureOf(e) });
    throw e;
  }
  await tell({ partition, result });
  return result;
}
