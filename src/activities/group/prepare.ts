/** Phase 1 of a group epoch: read every member, write all of them in one Kafka transaction and one XA branch, prepare both. */
import { randomBytes } from 'node:crypto';
import { SourceTopicGone } from '../../errors';
import { endTxn } from '../../kafka/internals';
import { CountedTransaction } from '../../kafka/landed';
import type { Marker } from '../../kafka/progress';
import { LOCK_WAIT_SEC, prepareBranch } from '../../mysql/branch';
import { insertLedger } from '../../mysql/ledger';
import { writeRows, type RowOp } from '../../mysql/sink';
import { mysqlMode, stageRows } from '../../mysql/stage';
import { attemptBqual, groupGtrid, xidToString } from '../../mysql/xid';
import type { GroupPrepareArgs, GroupPrepareResult, MemberEpoch } from '../../protocol';
import { applyTransform, tableMap, type KafkaMessage } from '../apply';
import { haltIfOverBudget, type EpochPart } from '../budget';
import { attempt, attemptToken, type ActivityContext } from '../context';
import { sendEpoch, type SentPart } from '../kafka-side';
import { rollbackGtrid } from '../mysql-side';
import type { PrepareSplit } from '../observe';
import { awaitLedger, timer } from '../prepare';
import { readGroup } from '../source';
import { groupTxnId, memberOf, srcOf } from './shared';

const CHUNK = 1000;

/** The prepare steps without the activity edge (advanceGroup runs them beside the commit). */
export function groupPreparer(ctx: ActivityContext) {
  const { cluster, pool } = ctx;

  /** Reads every member; a read that fails because a member's topic was deleted fails with SourceTopicGone. */
  async function read(args: GroupPrepareArgs) {
    const { spec, members, positions } = args;
    const parts = positions.map((p) => {
      const src = srcOf(spec, memberOf(members, p.id));
      return { topic: src.topic, partition: src.partition, from: p.offset };
    });
    try {
      return await readGroup(cluster, parts, spec.epoch, args.noWait ? 0 : spec.epoch.maxWaitMs, ctx.heartbeat);
    } catch (e) {
      const topics = await ctx.admin.listTopics().catch(() => null);
      const gone = topics && parts.find((p) => !topics.includes(p.topic));
      if (gone) throw new SourceTopicGone(gone.topic, gone.partition, spec.name);
      throw e;
    }
  }

  async function prepareGroup(args: GroupPrepareArgs, givenUp: () => boolean = () => false): Promise<GroupPrepareResult> {
    const { spec, group, members, groupEpoch, positions } = args;
    const started = Date.now();
    const at = { partition: group, epoch: groupEpoch };
    const token = attemptToken();
    await ctx.hit('prepare.start', at);
    // A retried prepare: roll back the group epoch's branches opened by older attempts.
    if (attempt() > 1) await rollbackGtrid(ctx, groupGtrid(spec.name, group, groupEpoch), { olderThan: token });
    const reads = await read(args);
    const split: PrepareSplit = { readMs: Date.now() - started, initMs: 0, transformMs: 0, kafkaMs: 0, previousCommitWaitMs: 0, mysqlMs: 0, xaPrepareMs: 0 };
    const timed = timer(split);
    // Members whose offset moved take part (records, or only aborted/control records skipped).
    const taking = positions.map((p, i) => ({ p, r: reads[i]!, member: memberOf(members, p.id) })).filter(({ p, r }) => r.end > p.offset);
    if (!taking.length) return { kind: 'empty' };

    const transform = ctx.transforms.get(spec.transform, spec.name);
    const tables = tableMap(spec);
    const xid = { gtrid: groupGtrid(spec.name, group, groupEpoch), bqual: attemptBqual(attempt(), token, randomBytes(4).toString('hex')) };
    const outputs: KafkaMessage[] = [];
    const deadLetters: KafkaMessage[] = [];
    const rows: RowOp[] = [];
    const parts: (SentPart & { m: Omit<MemberEpoch, 'markerOffset'>; sink: () => void })[] = [];
    const judged: EpochPart[] = [];
    for (const { p, r, member } of taking) {
      const tctx = ctx.transformCtx(spec, p.id, p.epoch);
      const src = srcOf(spec, member);
      const applied = await timed('transformMs', () => applyTransform(spec, transform, r.records, tctx, tables, src.layout));
      outputs.push(...applied.outputs);
      deadLetters.push(...applied.deadLetters);
      rows.push(...applied.rows);
      judged.push({ partition: p.id, epoch: p.epoch, applied, records: r.records.length });
      const m = { id: p.id, epoch: p.epoch, start: p.offset, end: r.end, records: r.records.length, deadLetters: applied.deadLetters.length };
      // Each member's marker names the group's branch: a committed marker of any member decides it.
      const marker: Marker = { pipeline: spec.name, partition: p.id, epoch: p.epoch, start: p.offset, end: r.end, records: r.records.length, redo: false, xid: xidToString(xid) };
      const sink = () => {
        for (let i = 0; i < applied.processed.length; i += CHUNK) {
          transform.sink?.(applied.processed.slice(i, i + CHUNK), { ...tctx, writtenInAttempt: Math.min(i + CHUNK, applied.processed.length) });
        }
      };
      parts.push({ marker, src, m, sink });
    }
    // Before anything is written: a group epoch over the dead-letter budget is never committed.
    haltIfOverBudget(ctx, spec, `group ${group} epoch ${groupEpoch} (partitions ${judged.map((j) => `${j.partition} epoch ${j.epoch}`).join(', ')})`, judged);
    // InitProducerId on the group's id of this group epoch: fences zombies, aborts their open transaction.
    const txn = new CountedTransaction(cluster, groupTxnId(spec, group, groupEpoch), spec.kafkaSink.transactionTimeoutMs);
    const handle = await timed('initMs', () => txn.begin());
    try {
      const sent = await timed('kafkaMs', () => sendEpoch(ctx, txn, spec, { outputs, deadLetters }, parts));
      await ctx.hit('prepare.kafka-sent', at);
      const staged = mysqlMode(spec) === 'staged';
      const previous = args.afterCommitOf;
      // Direct writes: the previous group epoch's branch holds row locks on keys this one writes.
      if (!staged && previous) await timed('previousCommitWaitMs', () => awaitLedger(ctx, spec, previous.id, previous.epoch, givenUp));
      const dialect = await ctx.dialect();
      const lead = parts[0]!.m;
      let bodyDone = 0;
      await prepareBranch(
        pool,
        xid,
        async (conn) => {
          // All members' rows at once (same keys combined); staged under the first member's
          // epoch, so they are applied once, together, after the XA COMMIT.
          if (staged) await timed('mysqlMs', () => stageRows(conn, { pipeline: spec.name, partition: lead.id, epoch: lead.epoch }, rows, tables));
          else await timed('mysqlMs', () => writeRows(conn, rows, tables, dialect));
          for (const part of parts) part.sink();
          for (const { m } of parts) await timed('mysqlMs', () => insertLedger(conn, spec.name, m.id, { epoch: m.epoch, start: m.start, end: m.end, records: m.records, redo: false }));
          bodyDone = Date.now();
        },
        { afterPrepare: () => ctx.hit('prepare.xa-prepared', at), lockWaitSec: LOCK_WAIT_SEC[staged ? 'staged' : 'direct'] },
      );
      split.xaPrepareMs = Date.now() - bodyDone;
      const ms = Date.now() - started;
      for (const [i, { m }] of parts.entries()) {
        const r = taking[i]!.r;
        ctx.observe({ kind: 'prepared', pipeline: spec.name, partition: m.id, epoch: m.epoch, records: m.records, deadLetters: m.deadLetters, ms, end: m.end, lag: Math.max(0, r.sourceEnd - m.end), startedAt: started, split, group });
      }
      return { kind: 'prepared', groupEpoch, members: parts.map(({ m }, i) => ({ ...m, markerOffset: sent.markerOffsets[i]! })), kafka: { ...handle, written: sent.written }, xid: xidToString(xid) };
    } catch (e) {
      // Never in history: abort its transaction now rather than hold back the members' LSOs.
      await endTxn(cluster, handle, false).catch(() => undefined);
      throw e;
    }
  }

  return prepareGroup;
}
