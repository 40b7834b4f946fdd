/** Phase 1 of an epoch: read [offset, end), pre-commit the Kafka transaction and the XA branch. */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { endTxn } from '../kafka/internals';
import { CountedTransaction } from '../kafka/landed';
import type { Marker } from '../kafka/progress';
import { LOCK_WAIT_SEC, prepareBranch } from '../mysql/branch';
import { insertLedger, ledgerRow } from '../mysql/ledger';
import { writeRows } from '../mysql/sink';
import { mysqlMode, stageRows } from '../mysql/stage';
import { attemptBqual, epochGtrid, xidToString } from '../mysql/xid';
import type { EpochArgs, PrepareResult } from '../protocol';
import type { PipelineSpec } from '../spec';
import { applyTransform, tableMap } from './apply';
import { haltIfOverBudget } from './budget';
import { attempt, attemptToken, edge, type ActivityContext } from './context';
import { epochTransactionalId, sendEpoch } from './kafka-side';
import { rollbackBranches } from './mysql-side';
import type { PrepareSplit } from './observe';
import { readEpoch, readingSource, sourceOf } from './source';

/**
 * Arguments of prepareEpoch. `afterCommitOf`: the previous epoch of the partition may still be
 * committing (pipelined epochs). In direct mode its prepared XA branch holds row locks on the
 * keys this epoch writes, so this prepare opens its own branch only once that epoch's ledger row
 * is committed. (Blocking on the locks instead would deadlock when the previous epoch's MySQL
 * side must be redone: the redo would wait for this branch's locks, this branch for the redo's
 * commit.) Staged writes lock nothing shared and do not wait.
 */
export type PrepareArgs = EpochArgs & { afterCommitOf?: number };

const CHUNK = 1000;

/** Waits until the ledger row of (partition, epoch) is committed (pipelined direct-mode epochs), unless the caller gave up. */
export async function awaitLedger(ctx: ActivityContext, spec: PipelineSpec, partition: number, epoch: number, givenUp: () => boolean): Promise<void> {
  for (let delay = 2; !(await ledgerRow(ctx.pool, spec.name, partition, epoch)); delay = Math.min(50, delay * 2)) {
    if (givenUp()) throw new Error(`partition ${partition}: the next epoch is not prepared, the commit of epoch ${epoch} failed`);
    ctx.heartbeat();
    await sleep(delay);
  }
}

/** Adds the time of each timed step to its field of `split`. */
export function timer(split: PrepareSplit) {
  return async <T>(k: keyof PrepareSplit, fn: () => Promise<T> | T): Promise<T> => {
    const t0 = Date.now();
    try {
      return await fn();
    } finally {
      split[k] += Date.now() - t0;
    }
  };
}

/**
 * Phase 1 without the activity edge: advanceEpoch runs it beside the previous epoch's commit.
 * Errors come out raw; the caller's edge turns them into activity failures (decided: false).
 */
export function preparer(ctx: ActivityContext): (args: PrepareArgs, givenUp?: () => boolean) => Promise<PrepareResult> {
  const { cluster, pool } = ctx;

  return async (args: PrepareArgs, givenUp: () => boolean = () => false): Promise<PrepareResult> => {
    const { spec, partition, epoch, offset } = args;
    const src = sourceOf(args);
    const started = Date.now();
    const at = { partition, epoch };
    const token = attemptToken();
    await ctx.hit('prepare.start', at);
    if (attempt() > 1) {
      // A retried prepare: roll back this epoch's branches left by OLDER attempts. None of them
      // can be the decided one (this attempt runs because they failed or timed out); a newer
      // branch may be, if this attempt is itself a zombie, so it is never touched.
      await rollbackBranches(ctx, spec, partition, epoch, { olderThan: token });
      ctx.observe({ kind: 'retry', pipeline: spec.name, partition, activity: 'prepareEpoch' });
    }
    const waitMs = args.noWait ? 0 : spec.epoch.maxWaitMs;
    const { records, end, sourceEnd } = await readingSource(ctx.admin, spec, src, () => readEpoch(cluster, src.topic, src.partition, offset, spec.epoch, waitMs, ctx.heartbeat));
    if (end === offset) return { kind: 'empty', offset };
    const split: PrepareSplit = { readMs: Date.now() - started, initMs: 0, transformMs: 0, kafkaMs: 0, previousCommitWaitMs: 0, mysqlMs: 0, xaPrepareMs: 0 };
    const timed = timer(split);

    const transform = ctx.transforms.get(spec.transform, spec.name);
    const tables = tableMap(spec);
    const tctx = ctx.transformCtx(spec, partition, epoch);
    const xid = { gtrid: epochGtrid(spec.name, partition, epoch), bqual: attemptBqual(attempt(), token, randomBytes(4).toString('hex')) };
    // The marker names the branch: a committed marker tells recovery which branch was decided.
    const marker: Marker = { pipeline: spec.name, partition, epoch, start: offset, end, records: records.length, redo: false, xid: xidToString(xid) };
    // Transform, then Kafka, then MySQL: the XA branch opens last and stays open briefly.
    const applied = await timed('transformMs', () => applyTransform(spec, transform, records, tctx, tables, src.layout));
    const deadLetters = applied.deadLetters.length;
    // Before anything is written: an epoch over the dead-letter budget is never committed.
    haltIfOverBudget(ctx, spec, `partition ${partition} epoch ${epoch}`, [{ partition, epoch, applied, records: records.length }]);
    // InitProducerId on this epoch's transactional id: fences zombies and aborts their open transaction.
    // Counted: each send must acknowledge every partition it carried (src/kafka/landed.ts).
    const txn = new CountedTransaction(cluster, epochTransactionalId(spec, partition, epoch), spec.kafkaSink.transactionTimeoutMs);
    const handle = await timed('initMs', () => txn.begin());
    try {
      // Checked before it returns: the log holds exactly what was sent (src/kafka/landed.ts).
      const sent = await timed('kafkaMs', () => sendEpoch(ctx, txn, spec, applied, [{ marker, src }]));
      await ctx.hit('prepare.kafka-sent', at);
      const staged = mysqlMode(spec) === 'staged';
      if (!staged && args.afterCommitOf !== undefined) await timed('previousCommitWaitMs', () => awaitLedger(ctx, spec, partition, args.afterCommitOf!, givenUp));
      const dialect = await ctx.dialect();
      let bodyDone = 0;
      await prepareBranch(
        pool,
        xid,
        async (conn) => {
          if (staged) await timed('mysqlMs', () => stageRows(conn, { pipeline: spec.name, partition, epoch }, applied.rows, tables));
          else await timed('mysqlMs', () => writeRows(conn, applied.rows, tables, dialect));
          // The transform's own sink sees the processed records once both sides hold them.
          for (let i = 0; i < applied.processed.length; i += CHUNK) {
            transform.sink?.(applied.processed.slice(i, i + CHUNK), { ...tctx, writtenInAttempt: Math.min(i + CHUNK, applied.processed.length) });
          }
          await timed('mysqlMs', () => insertLedger(conn, spec.name, partition, { epoch, start: offset, end, records: records.length, redo: false }));
          bodyDone = Date.now();
        },
        { afterPrepare: () => ctx.hit('prepare.xa-prepared', at), lockWaitSec: LOCK_WAIT_SEC[staged ? 'staged' : 'direct'] },
      );
      split.xaPrepareMs = Date.now() - bodyDone;
      ctx.observe({ kind: 'prepared', pipeline: spec.name, partition, epoch, records: records.length, deadLetters, ms: Date.now() - started, end, lag: Math.max(0, sourceEnd - end), startedAt: started, split });
      return { kind: 'prepared', epoch, start: offset, end, records: records.length, deadLetters, kafka: { ...handle, markerOffset: sent.markerOffsets[0]!, written: sent.written }, xid: xidToString(xid) };
    } catch (e) {
      // This attempt's result will never be in history: abort its open transaction now rather
      // than let it hold back the LSO until the next InitProducerId or the broker's timeout.
      // (Safe: only this attempt's handle can name it; a fenced handle is refused anyway.)
      await endTxn(cluster, handle, false).catch(() => undefined);
      throw e;
    }
  };
}

export function createPrepare(ctx: ActivityContext) {
  const prepare = preparer(ctx);
  return {
    async prepareEpoch(args: PrepareArgs): Promise<PrepareResult> {
      return edge(() => prepare(args), { decided: false });
    },
  };
}
