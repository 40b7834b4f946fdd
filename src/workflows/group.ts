/**
 * A partition group (spec.parallelism): the engine (src/workflows/engine.ts) over several source
 * partitions, every epoch one Kafka transaction and one XA branch for all of them. Partitions
 * added to the source while it runs join at an epoch boundary (addMembersSignal). Runs recorded
 * before ONE_ENGINE_PATCH replay the legacy loop (src/workflows/legacy/group.ts).
 */
import {
  CancellationScope,
  ContinueAsNew,
  continueAsNew,
  getExternalWorkflowHandle,
  patched,
} from '@temporalio/workflow';
import type { GroupInput } from '../protocol';
import { pipelineWorkflowId } from '../spec';
import { runEngine } from './engine';
import {
  failureOf,
  partitionEndedSignal,
  partitionsEndedSignal,
  type PartitionEnd,
  type PartitionResult,
} from './interface';
import { GROUP_ENDS_PATCH, runGroup } from './legacy/group';
import { ONE_ENGINE_PATCH } from './partition';

export async function groupWorkflow(input: GroupInput): Promise<PartitionResult[]> {
  const { spec, group } = input;
  const engine = patched(ONE_ENGINE_PATCH);
  /** Every member's end in one signal (group-ends-v1; the engine always). */
  const tell = (ends: PartitionEnd[]) =>
    CancellationScope.nonCancellable(async () => {
      const pipeline = getExternalWorkflowHandle(pipelineWorkflowId(spec.name));
      if (engine || patched(GROUP_ENDS_PATCH))
        await pipeline.signal(partitionsEndedSignal, ends).catch(() => undefined);
      else await Promise.all(ends.map((end) => pipeline.signal(partitionEndedSignal, end).catch(() => undefined)));
    });
  let ids = input.members.map((m) => m.id);
  const membersNow = (now: number[]) => (ids = now);
  let results: PartitionResult[];
  try {
    results = engine
      ? await runEngine(
          {
            spec,
            group,
            solo: false,
            members: input.members,
            ...(input.state ? { carried: input.state } : {}),
            ...(input.control ? { control: input.control } : {}),
          },
          {
            continueAsNew: (c) =>
              continueAsNew<typeof groupWorkflow>({
                spec,
                group,
                members: c.all,
                state: { groupEpoch: c.groupEpoch, members: c.members },
                control: c.control,
              }),
            membersNow,
          },
        )
      : await runGroup(input, membersNow);
  } catch (e) {
    if (!(e instanceof ContinueAsNew)) await tell(ids.map((partition) => ({ partition, ...failureOf(e) })));
    throw e;
  }
  await tell(results.map((result) => ({ partition: result.partition, result })));
  return results;
}
