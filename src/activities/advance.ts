/**
 * Commit epoch e and prepare e+1 in one activity (every epoch of the engine's loop but the last
 * of a run): per epoch one activity and one workflow task instead of two of each, and a
 * workflow holds one activity slot at a time instead of two (the prepare of e+1 waiting for
 * data no longer keeps another unit's commit from starting).
 *
 * e's decision is already in history; e+1's enters history with this activity's result. So
 * nothing of e+1 may outlive a failed or aborted attempt: when e's commit fails, or the broker
 * aborted e's transaction (e must be redone before e+1 is in the log), a prepared e+1 is
 * withdrawn here before the activity returns. On the worker that prepared e, e's commit has
 * usually begun already, as soon as e's decision was in history (./decided.ts): the commit here
 * then takes its outcome, and e+1 is committed the same way once this result is in history.
 */
import { notAuthorized } from '../errors';
import {
  advancePositions,
  type GroupAdvanceArgs,
  type GroupAdvanceResult,
  type GroupPrepareResult,
  type KafkaCommitOutcome,
} from '../protocol';
import { committer, decider } from './commit';
import { edge, type ActivityContext } from './context';
import { preparer } from './prepare';

type Settled<P> = { ok: true; r: P } | { ok: false; e: unknown };

/**
 * The overlap itself: `prepare` runs beside `commit`, told to give up (`givenUp`) once the
 * commit failed; `withdraw` takes back a prepared next epoch. Errors of `prepare` keep the
 * prepare activity's meaning: a refused permission ends the workflow (the caller then still
 * commits e on its own).
 */
export async function overlap<C extends { kafka: KafkaCommitOutcome }, P extends { kind: string }>(
  commit: () => Promise<C>,
  prepare: (givenUp: () => boolean) => Promise<P>,
  withdraw: (prepared: P) => Promise<void>,
): Promise<C & { next?: P }> {
  let commitFailed = false;
  const preparing: Promise<Settled<P>> = prepare(() => commitFailed).then(
    (r) => ({ ok: true, r }),
    (e: unknown) => ({ ok: false, e }),
  );
  const withdrawNext = async () => {
    const n = await preparing;
    if (n.ok && n.r.kind === 'prepared') await withdraw(n.r);
  };
  let committed: C;
  try {
    committed = await commit();
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
  if (!n.ok) throw notAuthorized(n.e, false) ?? n.e;
  return { ...committed, next: n.r };
}

/** The advance without the activity edge: commit `prepared`, prepare the unit's next epoch from `positions` moved past it. */
export function advancer(ctx: ActivityContext) {
  const prepare = preparer(ctx);
  const commit = committer(ctx);
  return (args: GroupAdvanceArgs): Promise<GroupAdvanceResult> => {
    const { spec, group, solo, members, prepared } = args;
    const lead = prepared.members[0]!;
    return overlap<Omit<GroupAdvanceResult, 'next'>, GroupPrepareResult>(
      () => commit.both(args),
      (givenUp) =>
        prepare(
          {
            spec,
            group,
            ...(solo ? { solo } : {}),
            members,
            groupEpoch: prepared.groupEpoch + 1,
            positions: advancePositions(args.positions, prepared),
            ...(args.noWait !== undefined ? { noWait: args.noWait } : {}),
            afterCommitOf: { id: lead.id, epoch: lead.epoch },
          },
          givenUp,
        ),
      (next) => (next.kind === 'prepared' ? commit.withdraw({ spec, prepared: next }) : Promise.resolve()),
    );
  };
}

export function createAdvance(ctx: ActivityContext) {
  const advance = advancer(ctx);
  const decide = decider(ctx);
  return {
    /** Commits epoch e of the unit and prepares e+1; e+1 commits as soon as this result is in history. */
    async advanceMembers(args: GroupAdvanceArgs): Promise<GroupAdvanceResult> {
      const r = await edge(() => advance(args));
      return decide(r, args, r.next);
    },
  };
}
