/**
 * Before a partition workflow runs epochs (fresh start, restart, continue-as-new): workflow
 * state, ledger and progress marker must agree, and whatever a crash left in doubt is decided
 * through the shared recovery path (src/recovery.ts) — including redoing the side of an epoch
 * that one participant committed and the other did not.
 */
import { ReconcileMismatch } from '../errors';
import { earliestOffset, latestOffset, ISOLATION } from '../kafka/internals';
import type { ReconcileArgs, ReconcileResult } from '../protocol';
import { carryOut, describeSplit, examineGroupBranches, examinePartition, loggedSplits, namedXids, resolveGroupBranches, settleKafka } from '../recovery';
import { reportSplit } from './commit';
import { attemptToken, edge, type ActivityContext } from './context';
import { redoKafkaSide } from './kafka-side';
import { applyEpoch, redoMysqlSide } from './mysql-side';
import { readingSource, sourceOf } from './source';

/**
 * The reconcile of one source partition id, without the activity edge: a partition group's
 * reconcile runs it for each member after settling the group's own transaction and branches.
 * Call it once the partition's Kafka side is settled (settleKafka); `token` is the caller's
 * fencing token (src/mysql/xid.ts).
 */
export async function reconcilePartition(ctx: ActivityContext, args: ReconcileArgs, token: number): Promise<ReconcileResult> {
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
      startFrom === 'earliest' ? earliestOffset(cluster, src.topic, src.partition) : latestOffset(cluster, src.topic, src.partition, ISOLATION.READ_COMMITTED),
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
      if (a.do === 'redo-kafka') await redoKafkaSide(ctx, spec, partition, { epoch, start: a.start, end: a.end, markerFrom: f.marker?.offset ?? 0 }, src);
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
    await redoKafkaSide(ctx, spec, partition, { epoch: m.epoch, start: m.start, end: m.end, ...(m.xid ? { xid: m.xid } : {}), markerFrom: s.markerOffset, original: s.original }, sourceOf(args));
  }
  if (splits.length) await settleKafka(ctx.cluster, spec, partition, ctx.heartbeat);
  return splits.map((s) => `${describeSplit(partition, s)}; written again where it aborted`);
}

export function createReconcile(ctx: ActivityContext) {
  return {
    async reconcile(args: ReconcileArgs): Promise<ReconcileResult> {
      return edge(async () => {
        const { spec, partition } = args;
        const token = attemptToken();
        // No epoch of this partition awaits a decision from this workflow now: settle what a
        // crashed run left open on the Kafka side, then read the evidence.
        await settleKafka(ctx.cluster, spec, partition, ctx.heartbeat);
        // Branches of partition groups (a pipeline that ran with spec.parallelism before): decided
        // by this partition's marker, or rolled back — before they could hold its ledger row.
        const groups = await resolveGroupBranches(ctx.pool, spec, await examineGroupBranches(ctx.pool, spec, () => true, () => namedXids(ctx.cluster, spec, [partition]), token));
        const r = await reconcilePartition(ctx, args, token);
        return groups.length ? { ...r, recovered: [...groups, ...(r.recovered ?? [])] } : r;
      });
    },
  };
}
