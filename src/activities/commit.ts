/** Phase 3 of an epoch: commit both sides of the decision in history, from any worker; withdraw an undecided one. */
import type { SplitCommits } from '../faults';
import { forceSplit, PreparedTransaction, type TxnHandle } from '../kafka/internals';
import { commitOrFindOut, txnParts, type KafkaVerdict } from '../kafka/outcome';
import { rollbackXid } from '../mysql/branch';
import { xidFromString } from '../mysql/xid';
import type { CommitArgs, KafkaCommitOutcome, KafkaSplit, MysqlCommitOutcome, WrittenParts } from '../protocol';
import type { PipelineSpec } from '../spec';
import { edge, type ActivityContext } from './context';
import { commitMysqlSide } from './mysql-side';
import { sourceOf } from './source';

/**
 * A split found by a commit (src/kafka/outcome.ts): a metric, and a line in the worker's log with
 * the producer, the epochs and the partitions; the commit's result carries it into history, and
 * the workflow's status shows it.
 */
export function reportSplit(ctx: ActivityContext, spec: PipelineSpec, epochs: { id: number; epoch: number }[], split: KafkaSplit): void {
  for (const m of epochs) ctx.observe({ kind: 'split', pipeline: spec.name, partition: m.id, epoch: m.epoch, split });
  ctx.warn(`Kafka split the transaction of ${epochs.map((m) => `source partition ${m.id} epoch ${m.epoch}`).join(', ')}: committed on ${split.committed.join(', ')}, aborted on ${split.aborted.join(', ')}; the aborted parts are redone`, {
    pipeline: spec.name,
    producerId: split.producerId,
    producerEpoch: split.producerEpoch,
    committed: split.committed,
    aborted: split.aborted,
  });
}

/** For the fault split=…: splits this transaction, committing its markers or its other parts. */
export function splitter(ctx: ActivityContext, spec: PipelineSpec, handle: TxnHandle & { written?: WrittenParts }, markers: { partition: number; offset: number }[]) {
  return (commits: SplitCommits) => forceSplit(ctx.cluster, handle, txnParts(spec, commits === 'markers' ? markers : [], commits === 'markers' ? undefined : handle.written));
}

/** The commit steps without the activity edge (advanceEpoch runs them beside the next prepare). */
export function committer(ctx: ActivityContext) {
  /** EndTxn(commit); 'aborted' (the broker aborted it, wholly or split) means the workflow must redo the Kafka side. */
  async function commitKafkaSide({ spec, partition, prepared }: CommitArgs): Promise<KafkaVerdict> {
    const started = Date.now();
    const at = { partition, epoch: prepared.epoch };
    const markers = [{ partition, offset: prepared.kafka.markerOffset }];
    await ctx.hit('commit.before', at, splitter(ctx, spec, prepared.kafka, markers));
    const verdict = await commitOrFindOut(ctx.cluster, spec, { handle: prepared.kafka, markers }, ctx.heartbeat);
    if (verdict.outcome === 'committed') ctx.observe({ kind: 'committed', pipeline: spec.name, partition, epoch: prepared.epoch, side: 'kafka', ms: Date.now() - started, startedAt: started });
    if (verdict.split) reportSplit(ctx, spec, [{ id: partition, epoch: prepared.epoch }], verdict.split);
    await ctx.hit('commit.between', at);
    return verdict;
  }

  const commitMysql = (args: CommitArgs): Promise<MysqlCommitOutcome> => commitMysqlSide(ctx, args.spec, args.partition, args.prepared, sourceOf(args));

  return {
    kafka: async (args: CommitArgs): Promise<KafkaCommitOutcome> => (await commitKafkaSide(args)).outcome,
    mysql: commitMysql,
    /** Both sides at once; each is idempotent, so a retry after one side failed redoes nothing the other did. */
    async both(args: CommitArgs): Promise<{ kafka: KafkaCommitOutcome; mysql: MysqlCommitOutcome; split?: KafkaSplit }> {
      const [k, mysql] = await Promise.all([commitKafkaSide(args), commitMysql(args)]);
      return { kafka: k.outcome, mysql, ...(k.split ? { split: k.split } : {}) };
    },
    /**
     * Withdraws a prepared epoch that was never committed: fences its transactional id
     * (InitProducerId aborts the open transaction) and rolls back its XA branch.
     */
    async withdraw({ spec, prepared }: { spec: PipelineSpec; prepared: { kafka: { transactionalId: string }; xid: string } }): Promise<void> {
      await new PreparedTransaction(ctx.cluster, prepared.kafka.transactionalId, spec.kafkaSink.transactionTimeoutMs).begin();
      await rollbackXid(ctx.pool, xidFromString(prepared.xid));
    },
  };
}

export function createCommit(ctx: ActivityContext) {
  const commit = committer(ctx);
  return {
    /** Kafka side alone (runs scheduled before commitEpoch existed). */
    async commitKafka(args: CommitArgs): Promise<KafkaCommitOutcome> {
      return edge(() => commit.kafka(args));
    },

    /** MySQL side alone (runs scheduled before commitEpoch existed). */
    async commitMysql(args: CommitArgs): Promise<MysqlCommitOutcome> {
      return edge(() => commit.mysql(args));
    },

    /** Both commits in one activity (one dispatch and one completion less per epoch than two). */
    async commitEpoch(args: CommitArgs): Promise<{ kafka: KafkaCommitOutcome; mysql: MysqlCommitOutcome; split?: KafkaSplit }> {
      return edge(() => commit.both(args));
    },

    /**
     * Withdraws a prepared epoch e+1 when epoch e must be redone, so that e's redo lands in the
     * output log before e+1 and source order holds; e+1 is then prepared again (runs before
     * advanceEpoch; advanceEpoch withdraws inside itself).
     */
    async abortPrepared(args: CommitArgs): Promise<void> {
      return edge(() => commit.withdraw(args));
    },
  };
}
