/** Before a group runs epochs, and for members that join it: settle the group's transaction and branches, then each member's own state. */
import { mapLimit } from '../../limit';
import type { GroupReconcileArgs, GroupReconcileResult } from '../../protocol';
import { examineGroupBranches, namedXids, RECOVERY_LANES, resolveGroupBranches, settleGroupKafka, settleKafka } from '../../recovery';
import { attemptToken, edge, type ActivityContext } from '../context';
import { reconcilePartition } from '../reconcile';

export function createGroupReconcile(ctx: ActivityContext) {
  const { cluster, pool } = ctx;
  return {
    /**
     * Before a group runs epochs, and for members that join it: the group's transaction and
     * branches are settled (fenced; a branch a member's marker names is committed, others rolled
     * back), then every member goes through the ungrouped reconcile. `joining`: the group runs
     * (its own epoch may be in flight), so only the joining members' state is touched.
     */
    async reconcileGroup(args: GroupReconcileArgs & { joining?: boolean }): Promise<GroupReconcileResult> {
      return edge(async () => {
        const { spec, group, members } = args;
        const token = attemptToken();
        const recovered: string[] = [];
        if (!args.joining) await settleGroupKafka(cluster, spec, group);
        await mapLimit(members, RECOVERY_LANES, (m) => settleKafka(cluster, spec, m.id, ctx.heartbeat));
        if (!args.joining) {
          // This group's branches, and those of groups that no longer exist (parallelism lowered).
          const parallelism = spec.parallelism ?? 1;
          const ids = members.map((m) => m.id);
          const decisions = await examineGroupBranches(pool, spec, (g) => g === group || g >= parallelism, () => namedXids(cluster, spec, ids), token);
          recovered.push(...(await resolveGroupBranches(pool, spec, decisions)));
        }
        // Members are independent from here on (their own ids, markers, branches and rows).
        const reconciled = await mapLimit(members, RECOVERY_LANES, (m) => {
          const expected = args.expected?.find((e) => e.id === m.id);
          return reconcilePartition(ctx, { spec, partition: m.id, source: m.source, ...(expected ? { expected: { epoch: expected.epoch, offset: expected.offset } } : {}) }, token);
        });
        const positions = members.map((m, i) => ({ id: m.id, epoch: reconciled[i]!.epoch, offset: reconciled[i]!.offset }));
        for (const r of reconciled) recovered.push(...(r.recovered ?? []));
        return { positions, ...(recovered.length ? { recovered } : {}) };
      });
    },

  };
}
