/** An epoch's MySQL side after its decision: XA COMMIT and the apply of staged rows; its redo. */
import { StaleEpoch } from '../errors';
import { commitBranch, recoverXids, rollbackXid } from '../mysql/branch';
import { ER_DUP_ENTRY, sqlErrno } from '../mysql/errors';
import { insertLedgerRows, ledgerPruneDue, pruneLedger } from '../mysql/ledger';
import { inLocalTransaction, writeRows } from '../mysql/sink';
import { applyPipelineEpoch, takeStaged } from '../mysql/stage';
import { bqualToken, epochGtrid, xidFromString, xidToString } from '../mysql/xid';
import type { MysqlCommitOutcome } from '../protocol';
import type { PipelineSpec } from '../spec';
import { tableMap } from './apply';
import type { ActivityContext } from './context';
import { reapply, type Src } from './source';

/**
 * Rolls back prepared branches of an epoch of a partition (of `gtrid`: by default the partition's
 * own epoch's): those older than `olderThan` (a fencing token), or all but `except` (the decided
 * xid, when history decided one). Returns the rolled-back xids.
 */
export async function rollbackBranches(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  which: { olderThan: number } | { except: string },
  gtrid = epochGtrid(spec.name, partition, epoch),
): Promise<string[]> {
  return rollbackGtrid(ctx, gtrid, which, (xid) =>
    ctx.observe({ kind: 'rolled-back', pipeline: spec.name, partition, epoch, xid }),
  );
}

/** The prepared branches of one gtrid (an epoch's or a group epoch's attempts), rolled back but those `which` keeps; returns the xids rolled back. */
export async function rollbackGtrid(
  ctx: ActivityContext,
  gtrid: string,
  which: { olderThan: number } | { except: string },
  onRolledBack?: (xid: string) => void,
): Promise<string[]> {
  const out: string[] = [];
  for (const x of await recoverXids(ctx.pool, gtrid)) {
    if (x.gtrid !== gtrid) continue;
    const keep = 'except' in which ? xidToString(x) === which.except : bqualToken(x.bqual) >= which.olderThan;
    if (keep) continue;
    if ((await rollbackXid(ctx.pool, x)) === 'rolled-back') {
      out.push(xidToString(x));
      onRolledBack?.(xidToString(x));
    }
  }
  return out;
}

/**
 * Applies an epoch's staged rows (staged runs only; once, however often called). `xid`: the
 * decided branch, whose rows this worker may still hold from its prepare (takeStaged).
 */
export async function applyEpoch(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  xid?: string,
): Promise<boolean> {
  const rows = xid === undefined ? undefined : takeStaged(xid);
  return applyPipelineEpoch(ctx.pool, spec, partition, epoch, await ctx.dialect(), rows);
}

/**
 * XA COMMIT of the decided branch `xid` from any connection: 'committed' (now or before), or
 * 'gone' (rolled back behind our back: no ledger row of `ledger`, an epoch the branch wrote).
 */
export async function commitDecided(
  ctx: ActivityContext,
  xid: string,
  ledger: { pipeline: string; partition: number; epoch: number },
): Promise<'committed' | 'gone'> {
  return (await commitBranch(ctx.pool, xidFromString(xid), ledger)) === 'gone' ? 'gone' : 'committed';
}

/** After an epoch's XA COMMIT and its apply (`applyMs`, timed by the caller): the ledger pruned now and then, the commit observed. */
export async function finishMysqlSide(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  started: number,
  applyMs: number,
): Promise<void> {
  if (ledgerPruneDue(epoch)) await pruneLedger(ctx.pool, spec.name, partition, epoch);
  ctx.observe({
    kind: 'committed',
    pipeline: spec.name,
    partition,
    epoch,
    side: 'mysql',
    ms: Date.now() - started,
    startedAt: started,
    applyMs,
  });
}

/**
 * The decided branch is gone (rolled back behind our back): write the epoch again in a local
 * transaction, the ledger row first. Every other prepared branch of the epoch is stale (history
 * decided exactly one), so it is rolled back first: it may hold the ledger row's lock. Those are
 * the partition's own epoch's branches and, for a member of a group epoch, the other attempts'
 * branches of the group epoch (the decided xid's gtrid): a zombie prepare's holds every member's
 * ledger row.
 */
export async function redoMysqlSide(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  p: { epoch: number; start: number; end: number; xid?: string },
  src: Src,
): Promise<MysqlCommitOutcome> {
  const stale = p.xid ? { except: p.xid } : { olderThan: Infinity };
  await rollbackBranches(ctx, spec, partition, p.epoch, stale);
  const unit = p.xid ? xidFromString(p.xid).gtrid : undefined;
  if (unit && unit !== epochGtrid(spec.name, partition, p.epoch))
    await rollbackBranches(ctx, spec, partition, p.epoch, stale, unit);
  const { records, applied } = await reapply(ctx, spec, partition, p, src);
  const dialect = await ctx.dialect();
  const outcome = await inLocalTransaction(ctx.pool, async (conn) => {
    try {
      await insertLedgerRows(conn, spec.name, [
        {
          partition,
          epoch: p.epoch,
          start: p.start,
          end: p.end,
          records: records.length,
          redo: true,
        },
      ]);
    } catch (e) {
      // Another attempt redid it first, or later epochs are committed: the ledger is the truth.
      if (sqlErrno(e) === ER_DUP_ENTRY || e instanceof StaleEpoch) return 'committed' as const;
      throw e;
    }
    await writeRows(conn, applied.rows, tableMap(spec), dialect);
    return 'redone' as const;
  });
  if (outcome === 'redone') ctx.observe({ kind: 'redo', pipeline: spec.name, partition, side: 'mysql' });
  return outcome;
}
