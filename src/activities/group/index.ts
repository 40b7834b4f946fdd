/**
 * The activities of a partition group (spec.parallelism; the data model is in
 * src/protocol/group.ts). Fault points (src/faults.ts) are hit with { partition: group,
 * epoch: group epoch }: each epoch reads every member at once and writes all of them in ONE
 * Kafka transaction (the group's transactional id) and ONE XA branch (the group's gtrid), with
 * each member's own progress marker, ledger row and source offsets inside. The decisions and
 * hazards are the ungrouped ones, taken from the same places: the commit's EndTxn ambiguity is
 * settled by a member's marker (commitOrFindOut), a branch gone behind our back is redone per
 * member (redoMysqlSide), a broker-aborted transaction is redone per member (redoKafkaSide),
 * and reconcile runs the per-partition recovery for each member after the group's own
 * transaction and branches are settled.
 *
 * By phase, as the ungrouped activities: prepare.ts (read, write, prepare), commit.ts (commit
 * both sides, the per-member Kafka redo), reconcile.ts; here the activities' edges and
 * advanceGroup, which runs a commit and the next prepare together.
 */
import { advancePositions, type GroupAdvanceArgs, type GroupAdvanceResult, type GroupCommitArgs, type GroupCommitResult, type GroupPrepareArgs, type GroupPrepareResult } from '../../protocol';
import { overlap } from '../advance';
import { committer } from '../commit';
import { edge, type ActivityContext } from '../context';
import { groupCommitter } from './commit';
import { groupPreparer } from './prepare';
import { createGroupReconcile } from './reconcile';

export function createGroup(ctx: ActivityContext) {
  const commit = committer(ctx);
  const prepareGroup = groupPreparer(ctx);
  const { commitGroup, redoGroupKafka } = groupCommitter(ctx);

  return {
    async prepareGroup(args: GroupPrepareArgs): Promise<GroupPrepareResult> {
      return edge(() => prepareGroup(args), { decided: false });
    },
    /** Commits group epoch e and prepares e+1 (src/activities/advance.ts says why in one activity). */
    async advanceGroup(args: GroupAdvanceArgs): Promise<GroupAdvanceResult> {
      return edge(() => {
        const { spec, group, members, prepared } = args;
        const lead = prepared.members[0]!;
        return overlap<GroupCommitResult, GroupPrepareResult>(
          () => commitGroup(args),
          (givenUp) =>
            prepareGroup(
              { spec, group, members, groupEpoch: prepared.groupEpoch + 1, positions: advancePositions(args.positions, prepared), noWait: args.noWait, afterCommitOf: { id: lead.id, epoch: lead.epoch } },
              givenUp,
            ),
          (next) => (next.kind === 'prepared' ? commit.withdraw({ spec, prepared: next }) : Promise.resolve()),
        );
      });
    },

    async commitGroup(args: GroupCommitArgs): Promise<GroupCommitResult> {
      return edge(() => commitGroup(args));
    },

    redoGroupKafka,
    ...createGroupReconcile(ctx),
  };
}
