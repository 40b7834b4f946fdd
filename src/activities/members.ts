/**
 * What the epoch activities share about the unit they run (src/protocol/group.ts): a member's
 * source, and the unit's identity per epoch. A partition group's transaction and branch are the
 * group's (transactional id onceflow.<pipeline>.g<group>.<slot>, gtrid of:<pipeline>:g<group>:<e>);
 * a group of one (`solo`, an ungrouped partition) keeps the partition's own
 * (onceflow.<pipeline>.<partition>.<slot>, of:<pipeline>:<partition>:<e>), so runs of every
 * version find each other's transactions and branches. Epoch e uses slot e mod pool (a pool ≥ 2
 * lets e+1 prepare while e awaits its commit).
 */
import { epochGtrid, groupGtrid } from '../mysql/xid';
import type { GroupArgs, GroupMember } from '../protocol';
import { groupTransactionalId, transactionalId, type PipelineSpec } from '../spec';
import { sourceOf, type Src } from './source';

export type Unit = Pick<GroupArgs, 'group' | 'solo'>;

export const srcOf = (spec: PipelineSpec, m: GroupMember): Src =>
  sourceOf({ spec, partition: m.id, ...(m.source ? { source: m.source } : {}) });

/** The member of `members` with id `id` (every position and member epoch names one). */
export const memberOf = (members: GroupMember[], id: number): GroupMember => members.find((m) => m.id === id)!;

/** The unit's transactional id for its epoch `e`. */
export const unitTxnId = (spec: PipelineSpec, u: Unit, e: number): string =>
  (u.solo ? transactionalId : groupTransactionalId)(spec.name, u.group, e % spec.kafkaSink.transactionalIdPool);

/** The XA gtrid of the unit's epoch `e`. */
export const unitGtrid = (spec: PipelineSpec, u: Unit, e: number): string =>
  (u.solo ? epochGtrid : groupGtrid)(spec.name, u.group, e);

/** How messages name the unit's epoch `e`. */
export const unitEpochName = (u: Unit, e: number, members: { id: number; epoch: number }[]): string =>
  u.solo
    ? `partition ${u.group} epoch ${e}`
    : `group ${u.group} epoch ${e} (partitions ${members.map((m) => `${m.id} epoch ${m.epoch}`).join(', ')})`;
