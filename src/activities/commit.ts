/** Phase 3 of an epoch: commit both sides of the decision in history, from any worker; withdraw an undecided one. */
import { PreparedTransaction } from '../kafka/internals';
import { commitOrFindOut } from '../kafka/outcome';
import { rollbackXid } from '../mysql/branch';
import { xidFromString } from '../mysql/xid';
import type { CommitArgs, KafkaCommitOutcome, MysqlCommitOutcome } from '../protocol';
import type { PipelineSpec } from '../spec';
import { edge, type ActivityContext } from './context';
import { commitMysqlSide } from './mysql-side';
import { sourceOf } from './source';

/** The commit steps without the activity edge (advanceEpoch runs them beside the next prepare). */
export function committer(ctx: ActivityContext) {
  /** EndTxn(commit); 'aborted' (the broker aborted it) means the workflow must redo the Kafka side. */
  async function commitKafkaSide({ spec, partition, prepared }: CommitArgs): Promise<KafkaCommitOutcome> {
    const started = Date.now();
    const at = { partition, epoch: prepared.epoch };
    await ctx.hit('commit.before', at);
    const outcome = await commitOrFindOut(ctx.cluster, spec, partition, prepared, ctx.heartbeat);
    if (outcome === 'committed') ctx.observe({ kind: 'committed', pipeline: spec.name, partition, epoch: prepared.epoch, side: 'kafka', ms: Date.now() - started, startedAt: started });
    await ctx.hit('commit.between', at);
    return outcome;
  }

  const commitMysql = (args: CommitArgs): Promise<MysqlCommitOutcome> => commitMysqlSide(ctx, args.spec, args.partition, args.prepared, sourceOf(args));

  return {
    kafka: commitKafkaSide,
    mysql: commitMysql,
    /** Both sides at once; each is idempotent, so a retry after one side failed redoes nothing the other did. */
    async both(args: CommitArgs): Promise<{ kafka: KafkaCommitOutcome; mysql: MysqlCommitOutcome }> {
      const [kafka, mysql] = await Promise.all([commitKafkaSide(args), commitMysql(args)]);
      return { kafka, mysql };
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
    async commitEpoch(args: CommitArgs): Promise<{ kafka: KafkaCommitOutcome; mysql: MysqlCommitOutcome }> {
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
