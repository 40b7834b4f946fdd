/**
 * Before the engine runs epochs (fresh start, restart, continue-as-new): workflow state, ledger
 * and progress marker of every member must agree, and whatever a crash left in doubt is decided
 * through the shared recovery path (src/recovery.ts) — including redoing the side of an epoch
 * that one participant committed and the other did not.
 */
import { ReconcileMismatch } from '../errors';
import { earliestOffset, latestOffset, ISOLATION } from '../kafka/internals';
import { mapLimit } from '../limit';
import type { GroupReconcileArgs, GroupReconcileResult, ReconcileArgs, ReconcileResult } from '../protocol';
import {
  carryOut,
  describeSplit,
  examineGroupBranches,
  examinePartition,
  loggedSplits,
  namedXids,
  RECOVERY_LANES,
  resolveGroupBranches,
  settleGoneGroupsKafka,
  settleGroupKafka,
  settleKafka,
} from '../recovery';
import { reportSplit } from './commit';
import { attemptToken, edge, type ActivityContext } from './context';
import { redoKafkaSide } from './kafka-side';
import { applyEpoch, redoMysqlSide } from './mysql-side';
import { readingSource, sourceOf } from './source';

/**
 * The reconcile of one source partition id, without the activity edge: the unit's reconcile
 * (below) runs it for each member after settling the unit's own transactions and branches.
 * Call it once the partition's Kafka side is settled (settleKafka); `token` is the caller's
 * fencing token (src/mysql/xid.ts).
 */
export async function reconcilePartition(
  ctx: ActivityContext,
  args: ReconcileArgs,
  token: number,
): Promise<ReconcileResult> {
  const { cluster } = ctx;
  const { spec, partition, expected } = args;
  const src = sourceOf(args);
  const startFrom = args.source?.startFrom ?? spec.source.startFrom;
  const repaired = expected ? [] : await repairSplits(ctx, args);
  const f = await examinePartition(ctx, spec, partition, token);
  const evidence = {
    ledger: f.ledger,
    marker: f.marker && { epoch: f.marker.epoch, start: f.marker.start, end: f.marker.end, offset: f.marker.offset },
    workflow: expected ?? null,
    epochs: f.epochs.map((e) => ({ epoch: e.epoch, actions: e.actions })),
  };
  if (f.refuse) {
    throw new ReconcileMismatch(
      `pipeline ${spec.name} partition ${partition}: ${f.refuse}. Recovery will not guess; inspect the ledger table and the progress topic (onceflow transactions ${spec.name} shows what is in doubt).`,
      evidence,
    );
  }
  const next = f.next ?? {
    epoch: 0,
    offset: await readingSource(ctx.admin, spec, src, () =>
      startFrom === 'earliest'
        ? earliestOffset(cluster, src.topic, src.partition)
        : latestOffset(cluster, src.topic, src.partition, ISOLATION.READ_COMMITTED),
    ),
  };
  if (expected && (expected.epoch !== next.epoch || expected.offset !== next.offset)) {
    throw new ReconcileMismatch(
      `pipeline ${spec.name} partition ${partition}: workflow state says epoch ${expected.epoch} at offset ${expected.offset}, ledger and progress marker say epoch ${next.epoch} at offset ${next.offset}`,
      evidence,
    );
  }
  const done = await carryOut(ctx, spec, f, {
    apply: (epoch) => applyEpoch(ctx, spec, partition, epoch),
    redo: async (epoch, a) => {
      if (a.do === 'redo-kafka')
        await redoKafkaSide(
          ctx,
          spec,
          partition,
          { epoch, start: a.start, end: a.end, markerFrom: f.marker?.offset ?? 0 },
          src,
        );
      else await redoMysqlSide(ctx, spec, partition, { epoch, start: a.start, end: a.end }, src);
    },
  });
  const rolledBack = f.epochs.flatMap((e) => e.actions.flatMap((a) => (a.do === 'rollback-branch' ? [a.xid] : [])));
  const applied = f.epochs.filter((e) => e.actions.some((a) => a.do === 'apply-staged')).map((e) => e.epoch);
  const recovered = [...repaired, ...done];
  return { ...next, rolledBack, ...(applied.length ? { applied } : {}), ...(recovered.length ? { recovered } : {}) };
}

/**
 * A restarted pipeline (no state carried over from a run whose commits judged their own epochs):
 * a transaction Kafka split before the restart is repaired before the progress marker is
 * trusted — written again only where it aborted (redoKafkaSide with the transaction found in the
 * log) — and then waited for, so that the marker reads below see the repair.
 */
async function repairSplits(ctx: ActivityContext, args: ReconcileArgs): Promise<string[]> {
  const { spec, partition } = args;
  const splits = await loggedSplits(ctx.cluster, spec, partition, ctx.heartbeat);
  for (const s of splits) {
    reportSplit(ctx, spec, [{ id: partition, epoch: s.marker.epoch }], s.split);
    const m = s.marker;
    await redoKafkaSide(
      ctx,
      spec,
      partition,
      {
        epoch: m.epoch,
        start: m.start,
        end: m.end,
        ...(m.xid ? { xid: m.xid } : {}),
        markerFrom: s.markerOffset,
        original: s.original,
      },
      sourceOf(args),
    );
  }
  if (splits.length) await settleKafka(ctx.cluster, spec, partition, ctx.heartbeat);
  return splits.map((s) => `${describeSplit(partition, s)}; written again where it aborted`);
}

/**
 * The unit's reconcile, without the activity edge: before it runs epochs, and for members that
 * join a running group (`joining`: the group's own epoch may be in flight, so only the joining
 * members' state is touched). First what a crashed run left open: the unit's transactions and
 * any open transaction of a group that no longer exists are fenced, and the XA branches of
 * partition groups settled (a branch a member's marker names is committed, others rolled back)
 * — for a group its own and those of groups that no longer exist (parallelism lowered), for a
 * group of one every group's (the pipeline ran with spec.parallelism before). Then every
 * member goes through the per-partition reconcile.
 */
export async function reconcileUnit(
  ctx: ActivityContext,
  args: GroupReconcileArgs & { joining?: boolean },
): Promise<{ result: GroupReconcileResult; each: ReconcileResult[] }> {
  const { cluster, pool } = ctx;
  const { spec, group, members } = args;
  const token = attemptToken();
  const recovered: string[] = [];
  // Transactions of groups that no longer exist first: they may hold back the members' LSOs.
  // Only a run that starts afresh (no state carried by continue-as-new) can follow a change of
  // parallelism, so only it asks the brokers.
  if (!args.joining && !args.expected) recovered.push(...(await settleGoneGroupsKafka(cluster, spec)));
  if (!args.solo && !args.joining) await settleGroupKafka(cluster, spec, group);
  await mapLimit(members, RECOVERY_LANES, (m) => settleKafka(cluster, spec, m.id, ctx.heartbeat));
  if (!args.joining) {
    const parallelism = spec.parallelism ?? 1;
    const ours = args.solo ? () => true : (g: number) => g === group || g >= parallelism;
    const ids = members.map((m) => m.id);
    const decisions = await examineGroupBranches(pool, spec, ours, () => namedXids(cluster, spec, ids), token);
    recovered.push(...(await resolveGroupBranches(pool, spec, decisions)));
  }
  // Members are independent from here on (their own ids, markers, branches and rows).
  const each = await mapLimit(members, RECOVERY_LANES, (m) => {
    const expected = args.expected?.find((e) => e.id === m.id);
    return reconcilePartition(
      ctx,
      {
        spec,
        partition: m.id,
        ...(m.source ? { source: m.source } : {}),
        ...(expected ? { expected: { epoch: expected.epoch, offset: expected.offset } } : {}),
      },
      token,
    );
  });
  const positions = members.map((m, i) => ({ id: m.id, epoch: each[i]!.epoch, offset: each[i]!.offset }));
  for (const r of each) recovered.push(...(r.recovered ?? []));
  return { result: { positions, ...(recovered.length ? { recovered } : {}) }, each };
}

export function createReconcile(ctx: ActivityContext) {
  return {
    /** Before the unit runs epochs (fresh start, restart, continue-as-new), and for members joining a running group. */
    async reconcileMembers(args: GroupReconcileArgs & { joining?: boolean }): Promise<GroupReconcileResult> {
      return edge(async () => (await reconcileUnit(ctx, args)).result);
    },
  };
}
