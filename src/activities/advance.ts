/**
 * Commit epoch e and prepare e+1 in one activity (the workflow's advance-epoch-v1 loop): per
 * epoch one activity and one workflow task instead of two of each, and a partition holds one
 * activity slot at a time instead of two (the prepare of e+1 waiting for data no longer keeps
 * another partition's commit from starting).
 *
 * e's decision is already in history; e+1's enters history with this activity's result. So
 * nothing of e+1 may outlive a failed or aborted attempt: when e's commit fails, or the broker
 * aborted e's transaction (e must be redone before e+1 is in the log), a prepared e+1 is
 * withdrawn here before the activity returns.
 */
import { notAuthorized } from '../errors';
import type { AdvanceArgs, AdvanceResult, PrepareResult } from '../protocol';
import { committer } from './commit';
import { edge, type ActivityContext } from './context';
import { preparer } from './prepare';

export function createAdvance(ctx: ActivityContext) {
  const prepare = preparer(ctx);
  const commit = committer(ctx);
  return {
    async advanceEpoch(args: AdvanceArgs): Promise<AdvanceResult> {
      return edge(async () => {
        const { spec, partition, prepared } = args;
        let commitFailed = false;
        const preparing: Promise<{ ok: true; r: PrepareResult } | { ok: false; e: unknown }> = prepare(
          { spec, partition, ...(args.source ? { source: args.source } : {}), epoch: prepared.epoch + 1, offset: prepared.end, noWait: args.noWait, afterCommitOf: prepared.epoch },
          () => commitFailed,
        ).then(
          (r) => ({ ok: true, r }),
          (e: unknown) => ({ ok: false, e }),
        );
        const withdrawNext = async () => {
          const n = await preparing;
          if (n.ok && n.r.kind === 'prepared') await commit.withdraw({ spec, prepared: n.r });
        };
        let committed: Omit<AdvanceResult, 'next'>;
        try {
          committed = await commit.both(args);
        } catch (e) {
          commitFailed = true;
          // The retry prepares e+1 again (and its InitProducerId would fence this one anyway).
          await withdrawNext().catch(() => undefined);
          throw e;
        }
        if (committed.kafka === 'aborted') {
          await withdrawNext();
          return committed;
        }
        const n = await preparing;
        // Prepare errors keep prepareEpoch's meaning: a refused permission ends the partition.
        if (!n.ok) throw notAuthorized(n.e, false) ?? n.e;
        return { ...committed, next: n.r };
      });
    },
  };
}
