/**
 * The activity names that histories of earlier workflow versions call (src/workflows/legacy/),
 * as thin adapters over the engine's activities: an ungrouped partition's (reconcile,
 * prepareEpoch, advanceEpoch, commitEpoch, commitKafka, commitMysql, abortPrepared, redoKafka)
 * run as a group of one, a partition group's (reconcileGroup, prepareGroup, advanceGroup,
 * commitGroup, redoGroupKafka) unchanged. A pipeline still running an old loop when the worker
 * is upgraded goes on through these until its next continue-as-new, which starts the engine —
 * but for a partition run without a SourceRef (started before source discovery), which keeps
 * the legacy loop across continue-as-new (src/workflows/partition.ts).
 */
import {
  memberEpoch,
  type AdvanceArgs,
  type AdvanceResult,
  type CommitArgs,
  type EpochArgs,
  type GroupAdvanceArgs,
  type GroupAdvanceResult,
  type GroupArgs,
  type GroupCommitArgs,
  type GroupCommitResult,
  type GroupPrepareArgs,
  type GroupPrepareResult,
  type GroupReconcileArgs,
  type GroupReconcileResult,
  type KafkaCommitOutcome,
  type KafkaSplit,
  type MysqlCommitOutcome,
  type PreparedEpoch,
  type PreparedGroupEpoch,
  type PrepareResult,
  type ReconcileArgs,
  type ReconcileResult,
  type SourceRef,
} from '../protocol';
import type { PipelineSpec } from '../spec';
import { advancer } from './advance';
import { committer } from './commit';
import { edge, type ActivityContext } from './context';
import { preparer } from './prepare';
import { reconcileUnit } from './reconcile';

/** prepareEpoch's arguments; `afterCommitOf`: the previous epoch, still committing (prepareMembers' afterCommitOf). */
export type PrepareArgs = EpochArgs & { afterCommitOf?: number };

/** An ungrouped partition's arguments as its group of one. */
const soloOf = (a: { spec: PipelineSpec; partition: number; source?: SourceRef }): GroupArgs => ({
  spec: a.spec,
  group: a.partition,
  solo: true,
  members: [{ id: a.partition, ...(a.source ? { source: a.source } : {}) }],
});

/** An ungrouped prepare result as its group of one's. */
function unitEpochOf(partition: number, p: PreparedEpoch): PreparedGroupEpoch {
  const { markerOffset, ...kafka } = p.kafka;
  return {
    kind: 'prepared',
    groupEpoch: p.epoch,
    members: [
      {
        id: partition,
        epoch: p.epoch,
        start: p.start,
        end: p.end,
        records: p.records,
        deadLetters: p.deadLetters,
        markerOffset,
      },
    ],
    kafka,
    xid: p.xid,
  };
}

/** A group of one's prepare result as an ungrouped one ('empty' names where it stayed). */
const epochOf = (r: GroupPrepareResult, offset: number): PrepareResult =>
  r.kind === 'empty' ? { kind: 'empty', offset } : memberEpoch(r, r.members[0]!);

const commitArgsOf = (a: CommitArgs): GroupCommitArgs => ({
  ...soloOf(a),
  prepared: unitEpochOf(a.partition, a.prepared),
});

export function createLegacy(ctx: ActivityContext) {
  const prepare = preparer(ctx);
  const advance = advancer(ctx);
  const commit = committer(ctx);

  const prepareEpoch = (a: PrepareArgs): Promise<PrepareResult> =>
    prepare({
      ...soloOf(a),
      groupEpoch: a.epoch,
      positions: [{ id: a.partition, epoch: a.epoch, offset: a.offset }],
      ...(a.noWait !== undefined ? { noWait: a.noWait } : {}),
      ...(a.afterCommitOf !== undefined ? { afterCommitOf: { id: a.partition, epoch: a.afterCommitOf } } : {}),
    }).then((r) => epochOf(r, a.offset));

  return {
    async reconcile(a: ReconcileArgs): Promise<ReconcileResult> {
      return edge(async () => {
        const { result, each } = await reconcileUnit(ctx, {
          ...soloOf(a),
          ...(a.expected ? { expected: [{ id: a.partition, ...a.expected }] } : {}),
        });
        // The partition's own result, with every recovery line (the unit's branches first).
        const own: ReconcileResult = { ...each[0]! };
        delete own.recovered;
        return { ...own, ...(result.recovered ? { recovered: result.recovered } : {}) };
      });
    },
    async prepareEpoch(a: PrepareArgs): Promise<PrepareResult> {
      return edge(() => prepareEpoch(a), { decided: false });
    },
    async advanceEpoch(a: AdvanceArgs): Promise<AdvanceResult> {
      return edge(async () => {
        const p = a.prepared;
        const r = await advance({
          ...commitArgsOf(a),
          positions: [{ id: a.partition, epoch: p.epoch, offset: p.start }],
          ...(a.noWait !== undefined ? { noWait: a.noWait } : {}),
        });
        const { next, ...outcomes } = r;
        return { ...outcomes, ...(next ? { next: epochOf(next, p.end) } : {}) };
      });
    },
    async commitEpoch(
      a: CommitArgs,
    ): Promise<{ kafka: KafkaCommitOutcome; mysql: MysqlCommitOutcome; split?: KafkaSplit }> {
      return edge(() => commit.both(commitArgsOf(a)));
    },
    /** The Kafka side alone (runs scheduled before commitEpoch existed). */
    async commitKafka(a: CommitArgs): Promise<KafkaCommitOutcome> {
      return edge(async () =>
        (await commit.kafkaSide(commitArgsOf(a))).state.kafka === 'committed' ? 'committed' : 'aborted',
      );
    },
    /** The MySQL side alone (runs scheduled before commitEpoch existed). */
    async commitMysql(a: CommitArgs): Promise<MysqlCommitOutcome> {
      return edge(() => commit.mysqlSide(commitArgsOf(a)));
    },
    /** Withdraws a prepared e+1 when e must be redone (runs before advanceEpoch; the advance withdraws inside itself). */
    async abortPrepared(a: CommitArgs): Promise<void> {
      return edge(() => commit.withdraw(a));
    },
    async redoKafka(a: CommitArgs): Promise<{ redone: boolean }> {
      return edge(async () => ({ redone: await commit.redo(commitArgsOf(a)) }));
    },

    async reconcileGroup(a: GroupReconcileArgs & { joining?: boolean }): Promise<GroupReconcileResult> {
      return edge(async () => (await reconcileUnit(ctx, a)).result);
    },
    async prepareGroup(a: GroupPrepareArgs): Promise<GroupPrepareResult> {
      return edge(() => prepare(a), { decided: false });
    },
    async advanceGroup(a: GroupAdvanceArgs): Promise<GroupAdvanceResult> {
      return edge(() => advance(a));
    },
    async commitGroup(a: GroupCommitArgs): Promise<GroupCommitResult> {
      return edge(() => commit.both(a));
    },
    async redoGroupKafka(a: GroupCommitArgs): Promise<void> {
      return edge(async () => void (await commit.redo(a)));
    },
  };
}
