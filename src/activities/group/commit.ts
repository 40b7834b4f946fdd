/** Phase 3 of a group epoch: commit both sides of the decision; redo the Kafka side per member if the broker aborted it. */
import { commitOrFindOut } from '../../kafka/outcome';
import { type GroupCommitArgs, type GroupCommitResult, type GroupMember, type MysqlCommitOutcome, type PreparedGroupEpoch } from '../../protocol';
import type { PipelineSpec } from '../../spec';
import { reportSplit, splitter } from '../commit';
import { edge, type ActivityContext } from '../context';
import { redoKafkaSide } from '../kafka-side';
import { applyEpoch, commitDecided, finishMysqlSide, redoMysqlSide } from '../mysql-side';
import { memberOf, srcOf } from './shared';

/** The commit steps without the activity edge (advanceGroup runs them beside the next prepare). */
export function groupCommitter(ctx: ActivityContext) {
  const { cluster } = ctx;

  /** The MySQL side: XA COMMIT of the group branch, then the staged rows; per member a redo if the branch is gone. */
  async function commitGroupMysql(spec: PipelineSpec, group: number, members: GroupMember[], p: PreparedGroupEpoch): Promise<MysqlCommitOutcome> {
    const started = Date.now();
    const lead = p.members[0]!;
    const at = { partition: group, epoch: p.groupEpoch };
    await ctx.hit('commit.mysql', at);
    const r = await commitDecided(ctx, p.xid, { pipeline: spec.name, partition: lead.id, epoch: lead.epoch });
    if (r === 'gone') {
      let outcome: MysqlCommitOutcome = 'committed';
      for (const m of p.members) {
        if ((await redoMysqlSide(ctx, spec, m.id, { epoch: m.epoch, start: m.start, end: m.end, xid: p.xid }, srcOf(spec, memberOf(members, m.id)))) === 'redone') outcome = 'redone';
      }
      return outcome;
    }
    await ctx.hit('commit.mysql-committed', at);
    await applyEpoch(ctx, spec, lead.id, lead.epoch);
    for (const m of p.members) await finishMysqlSide(ctx, spec, m.id, m.epoch, started, { applied: true });
    return 'committed';
  }

  /** Both sides of a decided group epoch; each is idempotent. Kafka 'aborted': the caller redoes it (redoGroupKafka). */
  async function commitGroup({ spec, group, members, prepared: p }: GroupCommitArgs): Promise<GroupCommitResult> {
    const started = Date.now();
    const markers = p.members.map((m) => ({ partition: m.id, offset: m.markerOffset }));
    await ctx.hit('commit.before', { partition: group, epoch: p.groupEpoch }, splitter(ctx, spec, p.kafka, markers));
    const [kafka, mysql] = await Promise.all([
      (async () => {
        const k = await commitOrFindOut(cluster, spec, { handle: p.kafka, markers }, ctx.heartbeat);
        if (k.outcome === 'committed') for (const m of p.members) ctx.observe({ kind: 'committed', pipeline: spec.name, partition: m.id, epoch: m.epoch, side: 'kafka', ms: Date.now() - started, startedAt: started });
        if (k.split) reportSplit(ctx, spec, p.members, k.split);
        await ctx.hit('commit.between', { partition: group, epoch: p.groupEpoch });
        return k;
      })(),
      commitGroupMysql(spec, group, members, p),
    ]);
    return { kafka: kafka.outcome, mysql, ...(kafka.split ? { split: kafka.split } : {}) };
  }

  return {
    commitGroup,
  /**
   * The broker aborted the group epoch's transaction: each member's part is produced again in
   * a transaction of its own (redoKafkaSide, the ungrouped redo: it first checks that no
   * earlier redo committed it). Members are independent streams, so their redos need not be
   * one transaction; each keeps its own order, and the group's next epoch follows them.
   */
  async redoGroupKafka({ spec, group, members, prepared: p }: GroupCommitArgs): Promise<void> {
    return edge(async () => {
      await ctx.hit('redo.start', { partition: group, epoch: p.groupEpoch });
      for (const m of p.members) {
        await redoKafkaSide(ctx, spec, m.id, { epoch: m.epoch, start: m.start, end: m.end, xid: p.xid, markerFrom: m.markerOffset, original: p.kafka }, srcOf(spec, memberOf(members, m.id)));
      }
    });
  },

  };
}
