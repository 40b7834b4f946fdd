/**
 * Phase 1 of an epoch: read every member from its position, write all of them in ONE Kafka
 * transaction and ONE XA branch (the unit's: src/activities/members.ts), prepare both. A group
 * of one (an ungrouped partition) is the same steps with one member.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { endTxn } from '../kafka/internals';
import { CountedTransaction } from '../kafka/landed';
import type { Marker } from '../kafka/progress';
import { dropBranch, LOCK_WAIT_SEC, prepareBranch, startBranch } from '../mysql/branch';
import { insertLedgerRows, ledgerRow } from '../mysql/ledger';
import { writeRows, type RowOp } from '../mysql/sink';
import { ensureStagedTableOnce, mysqlMode, rememberStaged, stageRows } from '../mysql/stage';
import type { StagedRows } from '../mysql/stage-codec';
import { attemptBqual, xidToString } from '../mysql/xid';
import type { GroupPrepareArgs, GroupPrepareResult, MemberEpoch } from '../protocol';
import type { PipelineSpec } from '../spec';
import { applyTransform, tableMap, type KafkaMessage } from './apply';
import { haltIfOverBudget, type EpochPart } from './budget';
import { decider } from './commit';
import { attempt, attemptToken, edge, type ActivityContext } from './context';
import { sendEpoch, type SentPart } from './kafka-side';
import { memberOf, srcOf, unitEpochName, unitGtrid, unitTxnId } from './members';
import { rollbackGtrid } from './mysql-side';
import type { PrepareSplit } from './observe';
import { readGroup, readingSource } from './source';

const CHUNK = 1000;

/**
 * Direct MySQL writes with pipelined epochs: waits until the ledger row of (partition, epoch) —
 * the previous epoch's — is committed, unless the caller gave up. Its prepared branch holds row
 * locks on keys this epoch writes; blocking on them instead would deadlock when that epoch's
 * MySQL side must be redone (the redo would wait for this branch's locks, this branch for the
 * redo's commit). Staged writes lock nothing shared and do not wait.
 */
export async function awaitLedger(
  ctx: ActivityContext,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  givenUp: () => boolean,
): Promise<void> {
  for (let delay = 2; !(await ledgerRow(ctx.pool, spec.name, partition, epoch)); delay = Math.min(50, delay * 2)) {
    if (givenUp())
      throw new Error(`partition ${partition}: the next epoch is not prepared, the commit of epoch ${epoch} failed`);
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
 * The prepare steps without the activity edge (the advance runs them beside the previous
 * epoch's commit). Errors come out raw; the caller's edge turns them into activity failures
 * (decided: false).
 */
export function preparer(ctx: ActivityContext) {
  const { cluster, pool } = ctx;

  /** Reads every member; a read that fails because a member's topic was deleted fails with SourceTopicGone. */
  function read(args: GroupPrepareArgs) {
    const { spec, members, positions } = args;
    const srcs = positions.map((p) => srcOf(spec, memberOf(members, p.id)));
    const parts = positions.map((p, i) => ({ topic: srcs[i]!.topic, partition: srcs[i]!.partition, from: p.offset }));
    const fetch = () => readGroup(cluster, parts, spec.epoch, args.noWait ? 0 : spec.epoch.maxWaitMs, ctx.heartbeat);
    return srcs.reduceRight<typeof fetch>((inner, src) => () => readingSource(ctx.admin, spec, src, inner), fetch)();
  }

  return async function prepare(
    args: GroupPrepareArgs,
    givenUp: () => boolean = () => false,
  ): Promise<GroupPrepareResult> {
    const { spec, group, members, groupEpoch, positions } = args;
    const started = Date.now();
    const at = { partition: group, epoch: groupEpoch };
    const token = attemptToken();
    await ctx.hit('prepare.start', at);
    if (attempt() > 1) {
      // A retried prepare: roll back this epoch's branches left by OLDER attempts. None of them
      // can be the decided one (this attempt runs because they failed or timed out); a newer
      // branch may be, if this attempt is itself a zombie, so it is never touched.
      await rollbackGtrid(ctx, unitGtrid(spec, args, groupEpoch), { olderThan: token }, (xid) =>
        positions.forEach((p) =>
          ctx.observe({ kind: 'rolled-back', pipeline: spec.name, partition: p.id, epoch: p.epoch, xid }),
        ),
      );
      for (const p of positions)
        ctx.observe({ kind: 'retry', pipeline: spec.name, partition: p.id, activity: 'prepare' });
    }
    const reads = await read(args);
    const split: PrepareSplit = {
      readMs: Date.now() - started,
      initMs: 0,
      transformMs: 0,
      kafkaMs: 0,
      previousCommitWaitMs: 0,
      mysqlMs: 0,
      xaPrepareMs: 0,
    };
    const timed = timer(split);
    // Members whose offset moved take part (records, or only aborted/control records skipped).
    const taking = positions
      .map((p, i) => ({ p, r: reads[i]!, member: memberOf(members, p.id) }))
      .filter(({ p, r }) => r.end > p.offset);
    if (!taking.length) return { kind: 'empty' };

    // InitProducerId on the unit's id of this epoch: fences zombies and aborts their open
    // transaction. Asked now, so the broker answers while the transform runs; it only opens the
    // id (no partition is in the transaction yet), so a prepare that stops before its first send
    // leaves nothing open. Counted: each send must acknowledge every partition it carried
    // (src/kafka/landed.ts).
    const txn = new CountedTransaction(cluster, unitTxnId(spec, args, groupEpoch), spec.kafkaSink.transactionTimeoutMs);
    const begun = txn.begin();
    begun.catch(() => undefined); // awaited below; a prepare that throws first drops it
    const transform = ctx.transforms.get(spec.transform, spec.name);
    const tables = tableMap(spec);
    const xid = {
      gtrid: unitGtrid(spec, args, groupEpoch),
      bqual: attemptBqual(attempt(), token, randomBytes(4).toString('hex')),
    };
    const outputs: KafkaMessage[] = [];
    const deadLetters: KafkaMessage[] = [];
    const rows: RowOp[] = [];
    const parts: (SentPart & { m: Omit<MemberEpoch, 'markerOffset'>; sink: () => void })[] = [];
    const judged: EpochPart[] = [];
    for (const { p, r, member } of taking) {
      const tctx = ctx.transformCtx(spec, p.id, p.epoch);
      const src = srcOf(spec, member);
      const applied = await timed('transformMs', () =>
        applyTransform(spec, transform, r.records, tctx, tables, src.layout),
      );
      outputs.push(...applied.outputs);
      deadLetters.push(...applied.deadLetters);
      rows.push(...applied.rows);
      judged.push({ partition: p.id, epoch: p.epoch, applied, records: r.records.length });
      const m = {
        id: p.id,
        epoch: p.epoch,
        start: p.offset,
        end: r.end,
        records: r.records.length,
        deadLetters: applied.deadLetters.length,
      };
      // Each member's marker names the branch: a committed marker of any member decides it.
      const marker: Marker = {
        pipeline: spec.name,
        partition: p.id,
        epoch: p.epoch,
        start: p.offset,
        end: r.end,
        records: r.records.length,
        redo: false,
        xid: xidToString(xid),
      };
      // The transform's own sink sees the processed records once both sides hold them.
      const sink = () => {
        for (let i = 0; i < applied.processed.length; i += CHUNK) {
          transform.sink?.(applied.processed.slice(i, i + CHUNK), {
            ...tctx,
            writtenInAttempt: Math.min(i + CHUNK, applied.processed.length),
          });
        }
      };
      parts.push({ marker, src, m, sink });
    }
    // Before anything is written: an epoch over the dead-letter budget is never committed.
    haltIfOverBudget(
      ctx,
      spec,
      unitEpochName(
        args,
        groupEpoch,
        judged.map((j) => ({ id: j.partition, epoch: j.epoch })),
      ),
      judged,
    );
    const handle = await timed('initMs', () => begun);
    const staged = mysqlMode(spec) === 'staged';
    const lockWaitSec = LOCK_WAIT_SEC[staged ? 'staged' : 'direct'];
    // A worker's first epoch asks these of the pool once; never after a branch took a connection.
    if (staged) await ensureStagedTableOnce(pool);
    const dialect = await ctx.dialect();
    // Staged writes: the branch's connection and XA START while Kafka is written (a started branch
    // holds no row lock until its first write, after the Kafka side). Direct writes start it
    // after the previous epoch's commit, below: a branch never holds a pool connection while it
    // waits for one.
    const branch = staged ? startBranch(pool, xid, lockWaitSec) : undefined;
    let branchTaken = false;
    try {
      // Checked before it returns: the log holds exactly what was sent (src/kafka/landed.ts).
      const sent = await timed('kafkaMs', () => sendEpoch(ctx, txn, spec, { outputs, deadLetters }, parts));
      await ctx.hit('prepare.kafka-sent', at);
      const previous = args.afterCommitOf;
      if (!staged && previous)
        await timed('previousCommitWaitMs', () => awaitLedger(ctx, spec, previous.id, previous.epoch, givenUp));
      const lead = parts[0]!.m;
      let bodyDone = 0;
      let stagedRows: StagedRows[] | undefined;
      // Transform, then Kafka, then MySQL: the XA branch is written last and stays open briefly.
      branchTaken = true;
      await prepareBranch(
        pool,
        xid,
        async (conn) => {
          // All members' rows at once (same keys combined); staged under the first member's
          // epoch, so they are applied once, together, after the XA COMMIT.
          if (staged)
            stagedRows = await timed('mysqlMs', () =>
              stageRows(conn, { pipeline: spec.name, partition: lead.id, epoch: lead.epoch }, rows, tables),
            );
          else await timed('mysqlMs', () => writeRows(conn, rows, tables, dialect));
          for (const part of parts) part.sink();
          await timed('mysqlMs', () =>
            insertLedgerRows(
              conn,
              spec.name,
              parts.map(({ m }) => ({
                partition: m.id,
                epoch: m.epoch,
                start: m.start,
                end: m.end,
                records: m.records,
                redo: false,
              })),
            ),
          );
          bodyDone = Date.now();
        },
        { afterPrepare: () => ctx.hit('prepare.xa-prepared', at), lockWaitSec, ...(branch ? { started: branch } : {}) },
      );
      split.xaPrepareMs = Date.now() - bodyDone;
      // Prepared: if this worker commits the epoch too, it upserts these rows without reading them back.
      if (stagedRows) rememberStaged(xidToString(xid), stagedRows);
      const ms = Date.now() - started;
      for (const [i, { m }] of parts.entries()) {
        const r = taking[i]!.r;
        ctx.observe({
          kind: 'prepared',
          pipeline: spec.name,
          partition: m.id,
          epoch: m.epoch,
          records: m.records,
          deadLetters: m.deadLetters,
          ms,
          end: m.end,
          lag: Math.max(0, r.sourceEnd - m.end),
          startedAt: started,
          split,
          ...(args.solo ? {} : { group }),
        });
      }
      return {
        kind: 'prepared',
        groupEpoch,
        members: parts.map(({ m }, i) => ({ ...m, markerOffset: sent.markerOffsets[i]! })),
        kafka: { ...handle, written: sent.written },
        xid: xidToString(xid),
      };
    } catch (e) {
      if (branch && !branchTaken) await dropBranch(branch);
      // This attempt's result will never be in history: abort its open transaction now rather
      // than let it hold back the members' LSOs until the next InitProducerId or the broker's
      // timeout. (Safe: only this attempt's handle can name it; a fenced handle is refused anyway.)
      await endTxn(cluster, handle, false).catch(() => undefined);
      throw e;
    }
  };
}

export function createPrepare(ctx: ActivityContext) {
  const prepare = preparer(ctx);
  const decide = decider(ctx);
  return {
    /** Phase 1 of an epoch of the unit (src/workflows/engine.ts); the epoch commits as soon as this result is in history. */
    async prepareMembers(args: GroupPrepareArgs): Promise<GroupPrepareResult> {
      const r = await edge(() => prepare(args), { decided: false });
      return decide(r, args, r);
    },
  };
}
