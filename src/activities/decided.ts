/**
 * Commit on decision. A prepared epoch is decided once its prepare result is in history: the
 * engine (src/workflows/engine.ts) commits every prepared epoch whose result it holds and
 * withdraws none. So the activity that prepared it completes itself through the worker's client
 * and, as soon as the server has taken the result, commits the epoch in the background, instead
 * of the commit waiting for the workflow task and the next activity's dispatch: the records are
 * visible that much earlier, and the commit no longer runs beside the next epoch's prepare.
 *
 * The activity that commits the epoch in the workflow's order (advanceMembers or commitMembers)
 * takes the outcome from here when it runs on the same worker; on another worker, or when the
 * early commit failed, it commits as before. Every commit step is idempotent (EndTxn of a
 * committed transaction, XA COMMIT of a committed branch found by its ledger row, the apply's
 * claim), so an early commit and a later one, or a stalled worker's early commit that finishes
 * after another worker's, leave one copy (the same as two attempts of a commit activity).
 */
import { CompleteAsyncError, Context } from '@temporalio/activity';
import { errorMessage } from '../errors';
import type { GroupCommitArgs, GroupCommitResult } from '../protocol';

/** How long an early commit's outcome waits to be taken (the committing activity ran elsewhere, or never came). */
export const DECIDED_KEPT_MS = 5 * 60_000;

/** The early commits of one worker, by the branch (xid) of the epoch. */
export class DecidedCommits {
  private readonly running = new Map<
    string,
    { outcome: Promise<GroupCommitResult | undefined>; forget: ReturnType<typeof setTimeout> }
  >();

  /** Runs `commit` now; its outcome (undefined if it failed: `failed` is told why) is kept for take(). */
  start(xid: string, commit: () => Promise<GroupCommitResult>, failed: (e: unknown) => void): void {
    const outcome = commit().catch((e: unknown) => {
      failed(e);
      return undefined;
    });
    const forget = setTimeout(() => this.running.delete(xid), DECIDED_KEPT_MS).unref();
    this.running.set(xid, { outcome, forget });
  }

  /** The early commit of the epoch with branch `xid`, once (undefined: none here, or it failed). */
  async take(xid: string): Promise<GroupCommitResult | undefined> {
    const kept = this.running.get(xid);
    if (!kept) return undefined;
    this.running.delete(xid);
    clearTimeout(kept.forget);
    return kept.outcome;
  }

  /** Waits for every early commit still running (a stopping worker, before it closes its clients). */
  async drain(): Promise<void> {
    await Promise.all([...this.running.values()].map((k) => k.outcome));
  }
}

/**
 * Ends the running activity with `result`. When `decided` names an epoch the result prepares,
 * the activity completes itself through the worker's client and, once the server has taken the
 * result, starts `commit` of that epoch and throws CompleteAsyncError (the worker reports
 * nothing more). If that completion fails — this attempt timed out (a zombie's result is refused),
 * the server did not answer — the result is returned for the worker to complete as usual and
 * nothing is committed here.
 */
export async function completeThenCommit<R>(
  result: R,
  decided: GroupCommitArgs | undefined,
  commits: DecidedCommits,
  commit: (args: GroupCommitArgs) => Promise<GroupCommitResult>,
  warn: (message: string) => void,
): Promise<R> {
  if (!decided) return result;
  const activity = Context.current();
  try {
    await activity.client.activity.complete(activity.info.taskToken, result);
  } catch {
    return result;
  }
  commits.start(
    decided.prepared.xid,
    () => commit(decided),
    (e) =>
      warn(
        `the early commit of epoch ${decided.prepared.groupEpoch} failed (the activity that commits it in order does it again): ${errorMessage(e)}`,
      ),
  );
  throw new CompleteAsyncError();
}
