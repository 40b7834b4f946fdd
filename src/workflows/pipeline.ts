/**
 * A pipeline: describes the source, then runs one partition workflow per source partition — or,
 * with spec.parallelism, one group workflow per partition group (./group.ts) — and forwards
 * control (pause, resume, drain, stop) to them. Adds no coordination of its own: each partition's
 * epochs are coordinated by the history of the workflow that runs it.
 *
 * Since `source-discovery-v1` it also looks for partitions added to its source topics every
 * `source.discoveryIntervalMs` and has each run (its own workflow, or its group's), with the control state
 * of the moment. The design, and why it is the simplest one that stays correct:
 *  - Every (topic, partition) has a *source partition id* assigned once by describeSource and
 *    kept in MySQL (src/mysql/sources.ts): ids survive continue-as-new and a new start, and for
 *    a single topic the id is the partition number, so the ids of older pipelines do not change.
 *  - The discovery loop would grow history without end, so the pipeline continues as new every
 *    DISCOVERIES_PER_RUN rounds. A child of a run that continued as new is not carried over and
 *    REQUEST_CANCEL would cancel it, so children are started with ParentClosePolicy.ABANDON and
 *    the run carries what it knows (control state, the children started, how they ended).
 *  - A new run cannot await the result of a child started by an earlier run. Each child
 *    therefore signals the pipeline's workflow id when it ends (partitionEndedSignal; a group
 *    workflow, all its members' ends in one partitionsEndedSignal); within
 *    a run the child's result is tracked too. A signal arriving during continue-as-new is
 *    delivered to the run that continues, so none is lost.
 *  - Control is forwarded by signal to every child that has not ended, by workflow id, which
 *    reaches the children of earlier runs as well.
 *  - The pipeline ends once every child has ended (drained, stopped or failed) after one last
 *    discovery found nothing new — partitions added before a drain are drained, not skipped.
 *    If the partitions were told to drain or stop directly (not through the pipeline), their
 *    results say so, and new partitions found in that last discovery get the same.
 * Runs recorded before the patch replay the start-once loop (src/workflows/legacy/pipeline.ts).
 */
import {
  ApplicationFailure,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  continueAsNew,
  defineSignal,
  getExternalWorkflowHandle,
  patched,
  proxyActivities,
  setHandler,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { Activities } from '../activities';
import { applyControl, validateControl, type Control, type ControlAction, type SourceRef } from '../protocol';
import { SEARCH_ATTRIBUTES } from '../search-attributes';
import { SPEC_DEFAULTS, groupOf, groupWorkflowId, runnerWorkflowId, type PipelineSpec } from '../spec';
import { PIPELINE_ACTIVITY_OPTIONS } from './activity-options';
import { groupWorkflow } from './group';
import {
  addMembersSignal,
  controlSignal,
  failureOf,
  partitionEndedSignal,
  partitionsEndedSignal,
  pipelineInfoQuery,
  type PartitionEnd,
  type PartitionResult,
} from './interface';
import { startOncePipeline } from './legacy/pipeline';
import { groupMemo, partitionMemo } from './memo';
import { partitionWorkflow } from './partition';

/** A source partition of the pipeline: its id and where it reads (src/mysql/sources.ts). */
export type PipelineSource = SourceRef & { id: number };

/**
 * Sent by every start of the pipeline (`startPipeline`): a running pipeline starts again the
 * partition workflows that halted (PipelineHalted: dead letters over the budget, a row for an
 * undeclared table; src/activities/budget.ts). Each reconciles from its ledger, so the halted
 * epoch is prepared again by the fixed transform: nothing lost, nothing twice.
 */
export const restartHaltedSignal = defineSignal('restartHalted');
export const RESTART_HALTED_PATCH = 'restart-halted-v1';

export const SOURCE_DISCOVERY_PATCH = 'source-discovery-v1';
/** Discovery rounds per run before continue-as-new: each round is a timer and an activity (about ten events). */
export const DISCOVERIES_PER_RUN = 500;

/** What a pipeline run hands to the next across continue-as-new. */
export interface PipelineCarry {
  control: Control;
  lastControl?: ControlAction;
  /** Every source partition whose workflow (its own or its group's) was started so far. */
  sources: PipelineSource[];
  /** The partition workflows that ended, and how. */
  ended: PartitionEnd[];
  /** Discovery rounds per run (default DISCOVERIES_PER_RUN); tests set it low to make runs continue as new. */
  roundsPerRun?: number;
}

const { describeSource } = proxyActivities<Activities>(PIPELINE_ACTIVITY_OPTIONS);

export async function pipelineWorkflow(spec: PipelineSpec, carry?: PipelineCarry): Promise<PartitionResult[]> {
  if (patched(SOURCE_DISCOVERY_PATCH)) return discoveringPipeline(spec, carry);
  return startOncePipeline(spec);
}

async function discoveringPipeline(spec: PipelineSpec, carry: PipelineCarry | undefined): Promise<PartitionResult[]> {
  let control: Control = carry?.control ?? { paused: false, drain: false, stop: false };
  let lastControl = carry?.lastControl;
  const started = new Map<number, PipelineSource>((carry?.sources ?? []).map((s) => [s.id, s]));
  const ended = new Map<number, PartitionEnd>((carry?.ended ?? []).map((e) => [e.partition, e]));
  /** Control actions this run accepted, in order: a child being started meanwhile gets those it missed. */
  const accepted: ControlAction[] = [];
  let missingTopics: string[] = [];
  // The workflow that runs a source partition: its own, or its group's (spec.parallelism).
  const idOf = (id: number) => runnerWorkflowId(spec, id);
  const forward = (action: ControlAction, ids: number[]) =>
    Promise.all(
      [...new Set(ids.filter((id) => !ended.has(id)).map(idOf))].map((wid) =>
        getExternalWorkflowHandle(wid)
          .signal(controlSignal, action)
          .catch(() => undefined),
      ),
    );

  setHandler(pipelineInfoQuery, () => ({
    pipeline: spec.name,
    partitions: started.size,
    workflowIds: [...new Set([...started.keys()].map(idOf))],
    lastControl,
    sources: [...started.values()].map((s) => {
      const e = ended.get(s.id);
      return {
        id: s.id,
        topic: s.topic,
        partition: s.partition,
        workflowId: idOf(s.id),
        ...(e ? { ended: e.result?.reason ?? `failed: ${e.error}` } : {}),
      };
    }),
    ...(missingTopics.length ? { missingTopics } : {}),
  }));
  setHandler(controlSignal, async (action) => {
    try {
      validateControl(action, control);
    } catch {
      return; // e.g. 'pause' while draining: signals cannot answer; the CLI's update to each partition does
    }
    lastControl = action;
    control = applyControl(control, action);
    accepted.push(action);
    await forward(action, [...started.keys()]);
  });
  // A child's own word on how it ended; a result seen directly is kept only if none came first.
  const recordEnds = (ends: PartitionEnd[]) => ends.forEach((end) => ended.set(end.partition, end));
  const recordResult = (end: PartitionEnd) => void (ended.has(end.partition) || ended.set(end.partition, end));
  setHandler(partitionEndedSignal, (end) => recordEnds([end]));
  setHandler(partitionsEndedSignal, recordEnds);
  const fresh = started.size === 0;
  if (fresh) upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }]);

  const start = async (s: PipelineSource) => {
    const missed = accepted.length;
    const { id, ...source } = s;
    let child: ChildWorkflowHandle<typeof partitionWorkflow> | undefined;
    try {
      child = await startChild(partitionWorkflow, {
        workflowId: idOf(id),
        args: [{ spec, partition: id, source, control }],
        // Children outlive a continue-as-new of this workflow (see the top of this file).
        parentClosePolicy: ParentClosePolicy.ABANDON,
        typedSearchAttributes: [
          { key: SEARCH_ATTRIBUTES.pipeline, value: spec.name },
          { key: SEARCH_ATTRIBUTES.partition, value: id },
        ],
        memo: partitionMemo(spec, id, s),
      });
    } catch (e) {
      // Still running from an earlier start of the pipeline: it reports its end here too.
      if (!(e instanceof WorkflowExecutionAlreadyStartedError)) throw e;
    }
    started.set(id, s);
    // Within this run the child's result is known directly too (its signal may say the same first).
    void child?.result().then(
      (result) => recordResult({ partition: id, result }),
      (e: unknown) => recordResult({ partition: id, ...failureOf(e) }),
    );
    for (const a of accepted.slice(missed)) await forward(a, [id]);
  };
  /**
   * Partition groups: new source partitions go to the workflow of their group — started with
   * them if none of its members runs, else told by signal (they join at an epoch boundary). A
   * group that is just closing refuses the signal; it is then started again.
   */
  const startInGroups = async (sources: PipelineSource[]) => {
    const byGroup = new Map<number, PipelineSource[]>();
    for (const s of sources) byGroup.set(groupOf(spec, s.id), [...(byGroup.get(groupOf(spec, s.id)) ?? []), s]);
    for (const [group, ss] of byGroup) {
      const missed = accepted.length;
      const members = ss.map(({ id, ...source }) => ({ id, source }));
      const workflowId = groupWorkflowId(spec.name, group);
      let live = [...started.values()].some((x) => groupOf(spec, x.id) === group && !ended.has(x.id));
      for (const s of ss) started.set(s.id, s);
      for (let told = false; !told;) {
        if (!live) {
          try {
            const child = await startChild(groupWorkflow, {
              workflowId,
              args: [{ spec, group, members, control }],
              parentClosePolicy: ParentClosePolicy.ABANDON,
              typedSearchAttributes: [{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }],
              memo: groupMemo(spec, group, ss),
            });
            // Within this run the results are known directly too (the group's signals may say the same first).
            void child.result().then(
              (results) => results.forEach((result) => recordResult({ partition: result.partition, result })),
              () => undefined, // a failed group tells each member's failure by signal
            );
            break;
          } catch (e) {
            if (!(e instanceof WorkflowExecutionAlreadyStartedError)) throw e;
          }
        }
        try {
          await getExternalWorkflowHandle(workflowId).signal(addMembersSignal, members);
          told = true;
        } catch {
          live = false; // the group closed meanwhile: start it again
        }
      }
      for (const a of accepted.slice(missed))
        await forward(
          a,
          ss.map((x) => x.id),
        );
    }
  };
  /** Has every source partition not started yet run by its workflow (its own, or its group's: started or told); returns how many. */
  const discover = async (discovery: boolean): Promise<number> => {
    const found = await describeSource(spec, { discovery });
    missingTopics = found.missingTopics ?? [];
    const fresh = (found.sources ?? []).filter((s) => !started.has(s.id));
    if (spec.parallelism) await startInGroups(fresh);
    else for (const s of fresh) await start(s);
    return fresh.length;
  };

  setHandler(restartHaltedSignal, async () => {
    const halted = [...ended.values()].filter((e) => e.errorType === 'PipelineHalted' && started.has(e.partition));
    if (!halted.length || !patched(RESTART_HALTED_PATCH)) return;
    const sources = halted.map((e) => started.get(e.partition)!);
    for (const e of halted) ended.delete(e.partition);
    if (spec.parallelism) await startInGroups(sources);
    else for (const s of sources) await start(s);
  });

  if (fresh) await discover(false);
  const roundsPerRun = carry?.roundsPerRun ?? DISCOVERIES_PER_RUN;
  const interval = spec.source.discoveryIntervalMs ?? SPEC_DEFAULTS.discoveryIntervalMs;
  const allEnded = () => [...started.keys()].every((id) => ended.has(id));
  for (let rounds = 1; ; rounds++) {
    if (allEnded()) {
      // Every partition has ended. If they were told to drain or stop directly, not through this
      // workflow, their results say which; new partitions of the last discovery get the same.
      if (!control.drain && !control.stop) {
        const drained = [...ended.values()].some((e) => e.result?.reason === 'drained');
        control = { ...control, paused: false, ...(drained ? { drain: true } : { stop: true }) };
      }
      // A partition restarted meanwhile (restartHaltedSignal) keeps the pipeline running.
      if ((await discover(true)) === 0 && allEnded()) break;
      continue;
    }
    await condition(allEnded, interval);
    if (allEnded()) continue;
    await discover(true);
    if (rounds >= roundsPerRun || workflowInfo().continueAsNewSuggested) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof pipelineWorkflow>(spec, {
        control,
        ...(lastControl ? { lastControl } : {}),
        sources: [...started.values()],
        ended: [...ended.values()],
        ...(carry?.roundsPerRun ? { roundsPerRun: carry.roundsPerRun } : {}),
      });
    }
  }
  const ends = [...ended.values()].sort((a, b) => a.partition - b.partition);
  const failed = ends.filter((e) => !e.result);
  if (failed.length) {
    // Typed as the first partition's failure (e.g. ReconcileMismatch), as when the pipeline awaited its children.
    throw ApplicationFailure.create({
      message: `pipeline ${spec.name}: ${failed.map((e) => `partition ${e.partition} failed: ${e.error}`).join('; ')}`,
      type: failed[0]!.errorType ?? 'PartitionFailed',
      nonRetryable: true,
    });
  }
  return ends.map((e) => e.result!);
}
