/**
 * Before a partition workflow runs epochs (fresh start, restart, continue-as-new): workflow
 * state, ledger and progress marker must agree, and whatever a crash left in doubt is decided
 * through the shared recovery path (src/recovery.ts) — including redoing the side of an epoch
 * that one participant committed and the other did not.
 */
import { ReconcileMismatch } from '../errors';
import { earliestOffset, latestOffset, ISOLATION } from '../kafka/internals';
import type { ReconcileArgs, ReconcileResult } from '../protocol';
import { carryOut, examinePartition, settleKafka } from '../recovery';
import { attemptToken, edge, type ActivityContext } from './context';
import { redoKafkaSide } from './kafka-side';
import { applyEpoch, redoMysqlSide } from './mysql-side';
import { readingSource, sourceOf } from './source';

export function createReconcile(ctx: ActivityContext) {
  const { cluster } = ctx;
  return {
    async reconcile(args: ReconcileArgs): Promise<ReconcileResult> {
      return edge(async () => {
        const { spec, partition, expected } = args;
        const src = sourceOf(args);
        const startFrom = args.source?.startFrom ?? spec.source.startFrom;
        // No epoch of this partition awaits a decision from this workflow now: settle what a
        // crashed run left open on the Kafka side, then read the evidence.
        await settleKafka(cluster, spec, partition, ctx.heartbeat);
        const f = await examinePartition(ctx, spec, partition, attemptToken());
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
        return { ...next, rolledBack, ...(applied.length ? { applied } : {}), ...(done.length ? { recovered: done } : {}) };
      });
    },
  };
}
