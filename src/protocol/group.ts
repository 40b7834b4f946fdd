/**
 * The epoch engine's unit: a set of members (source partitions) whose epoch is ONE Kafka
 * transaction and ONE XA branch for all of them. A partition group (spec.parallelism) has
 * several members; an ungrouped source partition is a group of one (`solo`), with the
 * partition's own identity: its transactional ids and its gtrid of:<pipeline>:<partition>:<epoch>,
 * `group` = the partition id and `groupEpoch` = the partition's epoch. One workflow loop
 * (src/workflows/engine.ts) and one set of activities drive both.
 *
 * Everything that recovery reads stays per source partition, as without groups: each member
 * has its own epoch numbers, its own progress marker (in its progress partition) and its own
 * ledger row — all written inside the group's transaction and branch. (The group epoch's rows
 * are staged once, under its first taking member's partition and epoch, and applied once.) So a member's
 * position never depends on which group it was in, and `verify`, `transactions` and reconcile
 * read members exactly as they read partitions of an ungrouped pipeline. What belongs to the
 * group is only the transaction's identity: its transactional ids and its XA gtrid
 * (src/mysql/xid.ts), numbered by the group epoch. Every member's marker names the group
 * branch's xid, so a committed marker of any member decides the branch.
 *
 * Pure module: imported by workflows and activities alike.
 */
import type { PipelineSpec } from '../spec';
import type {
  Control,
  KafkaCommitOutcome,
  KafkaHandle,
  KafkaSplit,
  MysqlCommitOutcome,
  PartitionState,
  SourceRef,
} from './index';

/** A source partition of a group: its source partition id and where it reads. */
export interface GroupMember {
  id: number;
  /** Absent only for ungrouped partitions of runs started before SourceRef (legacy loop): spec.source.topic[id]. */
  source?: SourceRef;
}

/** Where a member resumes: its next epoch number and source offset. */
export interface MemberPosition {
  id: number;
  epoch: number;
  offset: number;
}

/** A member's part of a prepared group epoch (only members that had records take part). */
export interface MemberEpoch {
  id: number;
  epoch: number;
  start: number;
  end: number;
  records: number;
  deadLetters: number;
  /** Offset of the member's progress marker (in its own progress partition). */
  markerOffset: number;
}

export interface PreparedGroupEpoch {
  kind: 'prepared';
  /** The group's epoch counter: names the transactional id slot and the XA gtrid. */
  groupEpoch: number;
  members: MemberEpoch[];
  kafka: Omit<KafkaHandle, 'markerOffset'>;
  /** 'gtrid#bqual' of the group's prepared XA branch. */
  xid: string;
}

export type GroupPrepareResult = PreparedGroupEpoch | { kind: 'empty' };

export interface GroupArgs {
  spec: PipelineSpec;
  /** The group's id; for a group of one (`solo`), the source partition id. */
  group: number;
  members: GroupMember[];
  /** A group of one: an ungrouped source partition, with the partition's transactional ids and gtrids (absent: a partition group). */
  solo?: boolean;
}

export interface GroupPrepareArgs extends GroupArgs {
  groupEpoch: number;
  positions: MemberPosition[];
  /** Return at once when no data is available (drain). */
  noWait?: boolean;
  /** Direct MySQL writes: open the branch only once this member epoch's ledger row (the previous group epoch's) is committed. */
  afterCommitOf?: { id: number; epoch: number };
}

export interface GroupCommitArgs extends GroupArgs {
  prepared: PreparedGroupEpoch;
}

/** advanceMembers (advanceGroup): commit `prepared` and prepare the next epoch from `positions` (those after the commit). */
export interface GroupAdvanceArgs extends GroupCommitArgs {
  positions: MemberPosition[];
  noWait?: boolean;
}

export interface GroupCommitResult {
  kafka: KafkaCommitOutcome;
  /** Present when the Kafka side came out split (then kafka is 'aborted': the aborted parts are redone). */
  split?: KafkaSplit;
  /** 'redone' if any member's MySQL side had to be redone. */
  mysql: MysqlCommitOutcome;
}

export interface GroupAdvanceResult extends GroupCommitResult {
  /** Absent when the Kafka side was aborted by the broker: the next epoch was withdrawn (the aborted one is redone first). */
  next?: GroupPrepareResult;
}

export interface GroupReconcileArgs extends GroupArgs {
  /** The workflow's own view (after continue-as-new); absent on a fresh start and for members that just joined. */
  expected?: MemberPosition[];
}

export interface GroupReconcileResult {
  positions: MemberPosition[];
  /** What recovery did, one line per action; absent when nothing was in doubt. */
  recovered?: string[];
}

/** Carried across continue-as-new: the group epoch counter and each member's state. */
export interface GroupState {
  groupEpoch: number;
  members: (PartitionState & { id: number })[];
}

export interface GroupInput {
  spec: PipelineSpec;
  group: number;
  members: GroupMember[];
  /** Carried across continue-as-new. */
  state?: GroupState;
  control?: Control;
}

/** Positions after a committed group epoch: each member that took part moves to its end and next epoch. */
export function advancePositions(positions: MemberPosition[], p: PreparedGroupEpoch): MemberPosition[] {
  return positions.map((pos) => {
    const m = p.members.find((x) => x.id === pos.id);
    return m ? { id: pos.id, epoch: m.epoch + 1, offset: m.end } : pos;
  });
}

/** A group of one's prepared epoch, seen as the epoch of an ungrouped partition: the legacy loop's PreparedEpoch (the adapters of src/activities/legacy.ts). */
export function memberEpoch(p: PreparedGroupEpoch, m: MemberEpoch) {
  return {
    kind: 'prepared' as const,
    epoch: m.epoch,
    start: m.start,
    end: m.end,
    records: m.records,
    deadLetters: m.deadLetters,
    kafka: { ...p.kafka, markerOffset: m.markerOffset },
    xid: p.xid,
  };
}

/** What the Web UI shows for an epoch: the members it covered, with their epochs. */
export const describeMembers = (members: { id: number; epoch: number }[]) =>
  members.map((m) => `${m.id}@${m.epoch}`).join(' ');
