/**
 * Phase 3 of an epoch: commit both sides of the decision in history, from any worker; redo a
 * Kafka side the broker aborted; withdraw a prepared epoch that will not be committed. Over the
 * unit's members (src/protocol/group.ts): a group of one is an ungrouped partition.
 *
 * Every step asks the protocol first (src/protocol/epoch.ts, `move`): the activity states what
 * it observed, and a move the table does not allow fails the activity loudly (IllegalMove,
 * not retried) instead of acting. One exception: the Kafka side's commit sends EndTxn first and
 * then moves by its outcome (prepared → committed, or → aborted), a move that cannot fail.
 */
import type { SplitCommits } from '../faults';
import { forceSplit, PreparedTransaction, type TxnHandle } from '../kafka/internals';
import { commitOrFindOut, txnParts } from '../kafka/outcome';
import { rollbackXid } from '../mysql/branch';
import { mysqlMode } from '../mysql/stage';
import { xidFromString } from '../mysql/xid';
import type {
  GroupArgs,
  GroupCommitArgs,
  GroupCommitResult,
  GroupPrepareResult,
  KafkaSplit,
  MysqlCommitOutcome,
  WrittenParts,
} from '../protocol';
import { move, prepared as preparedState, type EpochState } from '../protocol/epoch';
import type { PipelineSpec } from '../spec';
import { edge, type ActivityContext } from './context';
import { completeThenCommit } from './decided';
import { redoKafkaSide } from './kafka-side';
import { memberOf, srcOf } from './members';
import { applyEpoch, commitDecided, finishMysqlSide, redoMysqlSide } from './mysql-side';

/**
 * A split found by a commit or by a restarted pipeline's reconcile (src/kafka/outcome.ts): a
 * metric, and a line in the worker's log with the producer, the epochs and the partitions. A
 * commit's result carries it into history, and the workflow's status shows it; reconcile reports
 * it among the lines of what it recovered.
 */
export function reportSplit(
  ctx: ActivityContext,
  spec: PipelineSpec,
  epochs: { id: number; epoch: number }[],
  split: KafkaSplit,
): void {
  for (const m of epochs) ctx.observe({ kind: 'split', pipeline: spec.name, partition: m.id, epoch: m.epoch, split });
  ctx.warn(
    `Kafka split the transaction of ${epochs.map((m) => `source partition ${m.id} epoch ${m.epoch}`).join(', ')}: committed on ${split.committed.join(', ')}, aborted on ${split.aborted.join(', ')}; the aborted parts are redone`,
    {
      pipeline: spec.name,
      producerId: split.producerId,
      producerEpoch: split.producerEpoch,
      committed: split.committed,
      aborted: split.aborted,
    },
  );
}

/** For the fault split=…: splits this transaction, committing its markers or its other parts. */
export function splitter(
  ctx: ActivityContext,
  spec: PipelineSpec,
  handle: TxnHandle & { written?: WrittenParts },
  markers: { partition: number; offset: number }[],
) {
  return (commits: SplitCommits) =>
    forceSplit(
      ctx.cluster,
      handle,
      txnParts(spec, commits === 'markers' ? markers : [], commits === 'markers' ? undefined : handle.written),
    );
}

/** A decided epoch's state as the commit finds it: both sides prepared (the prepare result is in history). */
const decided = (spec: PipelineSpec, groupEpoch: number): EpochState =>
  preparedState(groupEpoch, mysqlMode(spec) === 'staged');

/** A prepared epoch as either result shape names it (the unit's, or an ungrouped run's of an older version). */
type Withdrawable = { kafka: { transactionalId: string }; xid: string; groupEpoch?: number; epoch?: number };

/** The commit steps without the activity edge (the advance runs them beside the next prepare). */
export function committer(ctx: ActivityContext) {
  const { cluster } = ctx;

  /** EndTxn(commit), or the outcome found out; 'aborted' (wholly, or split) means the workflow must redo the Kafka side. */
  async function kafkaSide({
    spec,
    group,
    prepared: p,
  }: GroupCommitArgs): Promise<{ state: EpochState; split?: KafkaSplit }> {
    const started = Date.now();
    const markers = p.members.map((m) => ({ partition: m.id, offset: m.markerOffset }));
    // Before EndTxn, while the MySQL side commits beside it (a crash here leaves MySQL committed, Kafka open).
    await ctx.hit('commit.before', { partition: group, epoch: p.groupEpoch }, splitter(ctx, spec, p.kafka, markers));
    const k = await commitOrFindOut(cluster, spec, { handle: p.kafka, markers }, ctx.heartbeat);
    // What the commit observed, stated to the protocol: aborted on some partition it wrote, or not.
    const state = move(decided(spec, p.groupEpoch), 'kafka', k.outcome, {
      committedEverywhere: k.outcome === 'committed',
    });
    if (k.outcome === 'committed')
      for (const m of p.members)
        ctx.observe({
          kind: 'committed',
          pipeline: spec.name,
          partition: m.id,
          epoch: m.epoch,
          side: 'kafka',
          ms: Date.now() - started,
          startedAt: started,
        });
    if (k.split) reportSplit(ctx, spec, p.members, k.split);
    await ctx.hit('commit.between', { partition: group, epoch: p.groupEpoch });
    return { state, ...(k.split ? { split: k.split } : {}) };
  }

  /** XA COMMIT of the decided branch, then the staged rows; per member a redo if the branch was rolled back behind our back. */
  async function mysqlSide({ spec, group, members, prepared: p }: GroupCommitArgs): Promise<MysqlCommitOutcome> {
    const started = Date.now();
    const lead = p.members[0]!;
    const at = { partition: group, epoch: p.groupEpoch };
    await ctx.hit('commit.mysql', at);
    // The branch named by the prepare result in history is the decided one.
    const committing = move(decided(spec, p.groupEpoch), 'mysql', 'committed', { decidedBranch: true });
    const r = await commitDecided(ctx, p.xid, { pipeline: spec.name, partition: lead.id, epoch: lead.epoch });
    if (r === 'gone') {
      // Observed: no ledger row of the epoch (commitBranch looked): the MySQL side is written again.
      move(move(decided(spec, p.groupEpoch), 'mysql', 'gone', { ledgerRow: false }), 'mysql', 'redone', {
        ledgerRow: false,
      });
      let outcome: MysqlCommitOutcome = 'committed';
      for (const m of p.members) {
        if (
          (await redoMysqlSide(
            ctx,
            spec,
            m.id,
            { epoch: m.epoch, start: m.start, end: m.end, xid: p.xid },
            srcOf(spec, memberOf(members, m.id)),
          )) === 'redone'
        )
          outcome = 'redone';
      }
      return outcome;
    }
    await ctx.hit('commit.mysql-committed', at);
    if (committing.staged) move(committing, 'mysql', 'applied');
    const applyFrom = Date.now();
    await applyEpoch(ctx, spec, lead.id, lead.epoch, p.xid);
    const appliedMs = Date.now() - applyFrom;
    for (const m of p.members) await finishMysqlSide(ctx, spec, m.id, m.epoch, started, appliedMs);
    return 'committed';
  }

  /** Both sides of a decided epoch at once; each is idempotent, so a retry after one side failed redoes nothing the other did. */
  async function bothNow(args: GroupCommitArgs): Promise<GroupCommitResult> {
    const [kafka, mysql] = await Promise.all([kafkaSide(args), mysqlSide(args)]);
    return {
      kafka: kafka.state.kafka === 'committed' ? 'committed' : 'aborted',
      mysql,
      ...(kafka.split ? { split: kafka.split } : {}),
    };
  }

  /** Both sides, or the outcome of this worker's early commit of the epoch (./decided.ts). */
  async function both(args: GroupCommitArgs): Promise<GroupCommitResult> {
    return (await ctx.decided.take(args.prepared.xid)) ?? bothNow(args);
  }

  /**
   * The broker aborted the epoch's transaction (the commit said so, in history): each member's
   * part is produced again in a transaction of its own (redoKafkaSide: it first checks which
   * parts already hold a committed copy). Members are independent streams, so their redos need
   * not be one transaction; each keeps its own order, and the unit's next epoch follows them.
   */
  async function redo({ spec, group, members, prepared: p }: GroupCommitArgs): Promise<boolean> {
    move(move(decided(spec, p.groupEpoch), 'kafka', 'aborted', { committedEverywhere: false }), 'kafka', 'redone', {
      committedEverywhere: false,
    });
    await ctx.hit('redo.start', { partition: group, epoch: p.groupEpoch });
    let redone = false;
    for (const m of p.members) {
      const src = srcOf(spec, memberOf(members, m.id));
      if (
        await redoKafkaSide(
          ctx,
          spec,
          m.id,
          { epoch: m.epoch, start: m.start, end: m.end, xid: p.xid, markerFrom: m.markerOffset, original: p.kafka },
          src,
        )
      )
        redone = true;
    }
    return redone;
  }

  /**
   * Withdraws a prepared epoch that will never be committed (its successor's commit failed, or
   * the epoch before it must be redone first): fences its transactional id (InitProducerId aborts
   * the open transaction) and rolls back its XA branch.
   */
  async function withdraw({ spec, prepared: p }: { spec: PipelineSpec; prepared: Withdrawable }): Promise<void> {
    const s = preparedState(p.groupEpoch ?? p.epoch ?? -1, false);
    move(s, 'kafka', 'withdrawn');
    move(s, 'mysql', 'rolled-back', { decidedBranch: false });
    await new PreparedTransaction(ctx.cluster, p.kafka.transactionalId, spec.kafkaSink.transactionTimeoutMs).begin();
    await rollbackXid(ctx.pool, xidFromString(p.xid));
  }

  return { kafkaSide, mysqlSide, both, bothNow, redo, withdraw };
}

/**
 * The end of an activity whose result prepares an epoch: it completes itself and commits that
 * epoch at once (./decided.ts). The early commit's 'committed' events say `early`; it sends no
 * heartbeats (its activity is complete).
 */
export function decider(ctx: ActivityContext) {
  const early = committer({
    ...ctx,
    heartbeat: () => undefined,
    observe: (e) => ctx.observe(e.kind === 'committed' ? { ...e, early: true } : e),
  });
  return <R>(result: R, { spec, group, solo, members }: GroupArgs, prepared?: GroupPrepareResult): Promise<R> =>
    completeThenCommit(
      result,
      prepared?.kind === 'prepared' ? { spec, group, ...(solo ? { solo } : {}), members, prepared } : undefined,
      ctx.decided,
      early.bothNow,
      ctx.warn,
    );
}

export function createCommit(ctx: ActivityContext) {
  const commit = committer(ctx);
  return {
    /** Both commits of a decided epoch of the unit, in one activity. */
    async commitMembers(args: GroupCommitArgs): Promise<GroupCommitResult> {
      return edge(() => commit.both(args));
    },
    /** The Kafka side of a decided epoch the broker aborted, produced again (never "log and lose"). */
    async redoMembers(args: GroupCommitArgs): Promise<{ redone: boolean }> {
      return edge(async () => ({ redone: await commit.redo(args) }));
    },
  };
}
