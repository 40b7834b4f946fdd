/** What the group activities share: a member's source and the group's transactional id per group epoch. */
import type { GroupMember } from '../../protocol';
import { groupTransactionalId, type PipelineSpec } from '../../spec';
import { sourceOf, type Src } from '../source';

export const srcOf = (spec: PipelineSpec, m: GroupMember): Src => sourceOf({ spec, partition: m.id, source: m.source });

/** The member of `members` with id `id` (every position and member epoch names one). */
export const memberOf = (members: GroupMember[], id: number): GroupMember => members.find((m) => m.id === id)!;

/** The group's transaction of group epoch `groupEpoch` uses slot groupEpoch mod pool (e+1 prepares while e commits). */
export const groupTxnId = (spec: PipelineSpec, group: number, groupEpoch: number) => groupTransactionalId(spec.name, group, groupEpoch % spec.kafkaSink.transactionalIdPool);
