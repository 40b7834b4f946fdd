/**
 * What the epoch workflows (partitionWorkflow, groupWorkflow: src/workflows/engine.ts and the
 * legacy loops) answer and send: their status queries, control update and signal, the signals
 * by which they tell the pipeline workflow how they ended, and their results; and the pipeline
 * workflow's `info` query (it takes the same `control` signal).
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Control, ControlAction, GroupMember, PartitionState, PartitionStatus, Phase } from '../protocol';

export const statusQuery = defineQuery<PartitionStatus>('status');
export const controlUpdate = defineUpdate<Control, [ControlAction]>('control');
export const controlSignal = defineSignal<[ControlAction]>('control');

export interface PipelineInfo {
  pipeline: string;
  partitions: number;
  workflowIds: string[];
  lastControl?: ControlAction;
  /** Runs since source-discovery-v1: every source partition started, its topic and partition, the workflow that runs it (its own or its group's), and how it ended. */
  sources?: { id: number; topic: string; partition: number; workflowId: string; ended?: string }[];
  /** Source topics the last discovery did not find. */
  missingTopics?: string[];
}

/** The pipeline workflow's answer: the source partitions it started and the workflows that run them. */
export const pipelineInfoQuery = defineQuery<PipelineInfo>('info');

/** How a partition workflow ended: its result, or the failure that ended it. */
export interface PartitionEnd {
  partition: number;
  result?: PartitionResult;
  error?: string;
  /** The innermost failure's type (e.g. 'ReconcileMismatch', 'SourceTopicGone'). */
  errorType?: string;
}

/** Sent by a partition workflow to its pipeline workflow when it ends (runs started with a SourceRef only); per member, by group workflows recorded before group-ends-v1. */
export const partitionEndedSignal = defineSignal<[PartitionEnd]>('partitionEnded');
/** Sent by a group workflow to its pipeline workflow when it ends: every member's end in one signal (since group-ends-v1). */
export const partitionsEndedSignal = defineSignal<[PartitionEnd[]]>('partitionsEnded');

export interface PartitionResult {
  pipeline: string;
  partition: number;
  state: PartitionState;
  reason: 'drained' | 'stopped';
}

/** The innermost message of a failure chain (an activity failure's cause names what went wrong). */
export function failureOf(e: unknown): { error: string; errorType?: string } {
  let error = e instanceof Error ? e.message : String(e);
  let errorType: string | undefined;
  for (let c: unknown = e; c instanceof Error; c = (c as { cause?: unknown }).cause) {
    error = c.message || error;
    const type = (c as { type?: unknown }).type;
    if (typeof type === 'string' && type) errorType = type;
  }
  return { error, ...(errorType ? { errorType } : {}) };
}

/** A group's own view: its members and the group epoch in flight. */
export interface GroupStatus {
  pipeline: string;
  group: number;
  phase: Phase;
  groupEpoch: number;
  members: (PartitionState & { id: number })[];
  control: Control;
  lastError?: string;
  runEpochs: number;
  inFlight: { groupEpoch: number; members: string; step: string }[];
  lastCommitAt?: number;
}

/** Without an argument the group's status; with a source partition id, that member's, shaped as an ungrouped partition's. */
export const groupStatusQuery = defineQuery<GroupStatus | PartitionStatus, [number?]>('status');
/** Sent by the pipeline workflow: source partitions (discovered while it runs) that belong to this group. */
export const addMembersSignal = defineSignal<[GroupMember[]]>('addMembers');
