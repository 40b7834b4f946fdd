/**
 * The activities of a partition group (spec.parallelism; the data model is in
 * src/protocol/group.ts). Fault points (src/faults.ts) are hit with { partition: group,
 * epoch: group epoch }: each epoch reads every member at once and writes all of them in ONE
 * Kafka transaction (the group's transactional id) and ONE XA branch (the group's gtrid), with
 * each member's own progress marker, ledger row and source offsets inside. The decisions and
 * hazards are the ungrouped ones, taken from the same places: the commit's EndTxn ambiguity is
 * settled by a member's marker (commitOrFindOut), a branch gone behind our back is redone per
 * member (redoMysqlSide), a broker-aborted transaction is redone per member (redoKafkaSide),
 * and reconcile runs the per-partition recovery for each member after the group's own
 * transaction and branches are settled.
 */
import { randomBytes } from 'node:crypto';
import { SourceTopicGone } from '../errors';
import { endTxn } from '../kafka/internals';
import { CountedTransaction, checkLanded } from '../kafka/landed';
import { commitOrFindOut } from '../kafka/outcome';
import type { Marker } from '../kafka/progress';
import { prepareBranch } from '../mysql/branch';
import { insertLedger } from '../mysql/ledger';
import { writeRows, type RowOp } from '../mysql/sink';
import { mysqlMode, stageRows } from '../mysql/stage';
import { attemptBqual, groupGtrid, xidToString } from '../mysql/xid';
import {
  advancePositions,
  memberEpoch,
  type GroupAdvanceArgs,
  type GroupAdvanceResult,
  type GroupCommitArgs,
  type GroupCommitResult,
  type GroupMember,
  type GroupPrepareArgs,
  type GroupPrepareResult,
  type GroupReconcileArgs,
  type GroupReconcileResult,
  type MemberEpoch,
  type MysqlCommitOutcome,
  type PreparedGroupEpoch,
} from '../protocol';
import { mapLimit } from '../limit';
import { examineGroupBranches, namedXids, RECOVERY_LANES, resolveGroupBranches, settleGroupKafka, settleKafka } from '../recovery';
import { groupTransactionalId, type PipelineSpec } from '../spec';
import { overlap } from './advance';
import { applyTransform, tableMap, type KafkaMessage } from './apply';
import { committer } from './commit';
import { attempt, attemptToken, edge, type ActivityContext } from './context';
import { redoKafkaSide, sendEpoch, type SentPart } from './kafka-side';
import { applyEpoch, commitDecided, finishMysqlSide, redoMysqlSide, rollbackGtrid } from './mysql-side';
import { reconcilePartition } from './reconcile';
import type { PrepareSplit } from './observe';
import { awaitLedger, timer } from './prepare';
import { readGroup, sourceOf, type Src } from './source';

const CHUNK = 1000;

const srcOf = (spec: PipelineSpec, m: GroupMember): Src => sourceOf({ spec, partition: m.id, source: m.source });

/** The group's transaction of group epoch `groupEpoch` uses slot groupEpoch mod pool (e+1 prepares while e commits). */
const groupTxnId = (spec: PipelineSpec, group: number, groupEpoch: number) => groupTransactionalId(spec.name, group, groupEpoch % spec.kafkaSink.transactionalIdPool);

export function createGroup(ctx: ActivityContext) {
  const { cluster, pool } = ctx;
  const commit = committer(ctx);

  /** Reads every member; a read that fails because a member's topic was deleted fails with SourceTopicGone. */
  async function read(args: GroupPrepareArgs) {
    const { spec, members, positions } = args;
    const parts = positions.map((p) => {
      const src = srcOf(spec, members.find((m) => m.id === p.id)!);
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
    const taking = positions.map((p, i) => ({ p, r: reads[i]!, member: members.find((m) => m.id === p.id)! })).filter(({ p, r }) => r.end > p.offset);
    if (!taking.length) return { kind: 'empty' };

    const transform = ctx.transforms.get(spec.transform, spec.name);
    const tables = tableMap(spec);
    const xid = { gtrid: groupGtrid(spec.name, group, groupEpoch), bqual: attemptBqual(attempt(), token, randomBytes(4).toString('hex')) };
    const outputs: KafkaMessage[] = [];
    const deadLetters: KafkaMessage[] = [];
    const rows: RowOp[] = [];
    const parts: (SentPart & { m: Omit<MemberEpoch, 'markerOffset'>; sink: () => void })[] = [];
    for (const { p, r, member } of taking) {
      const tctx = ctx.transformCtx(spec, p.id, p.epoch);
      const src = srcOf(spec, member);
      const applied = await timed('transformMs', () => applyTransform(spec, transform, r.records, tctx, tables, src.layout));
      outputs.push(...applied.outputs);
      deadLetters.push(...applied.deadLetters);
      rows.push(...applied.rows);
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
    // InitProducerId on the group's id of this group epoch: fences zombies, aborts their open transaction.
    const txn = new CountedTransaction(cluster, groupTxnId(spec, group, groupEpoch), spec.kafkaSink.transactionTimeoutMs);
    const handle = await timed('initMs', () => txn.begin());
    try {
      const markerOffsets = await timed('kafkaMs', () => sendEpoch(ctx, txn, spec, { outputs, deadLetters }, parts));
      await timed('kafkaMs', () => checkLanded(cluster, txn, handle, [spec.progressTopic]));
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
        { afterPrepare: () => ctx.hit('prepare.xa-prepared', at) },
      );
      split.xaPrepareMs = Date.now() - bodyDone;
      const ms = Date.now() - started;
      for (const [i, { m }] of parts.entries()) {
        const r = taking[i]!.r;
        ctx.observe({ kind: 'prepared', pipeline: spec.name, partition: m.id, epoch: m.epoch, records: m.records, deadLetters: m.deadLetters, ms, end: m.end, lag: Math.max(0, r.sourceEnd - m.end), startedAt: started, split, group });
      }
      return { kind: 'prepared', groupEpoch, members: parts.map(({ m }, i) => ({ ...m, markerOffset: markerOffsets[i]! })), kafka: handle, xid: xidToString(xid) };
    } catch (e) {
      // Never in history: abort its transaction now rather than hold back the members' LSOs.
      await endTxn(cluster, handle, false).catch(() => undefined);
      throw e;
    }
  }

  /** The MySQL side: XA COMMIT of the group branch, then the staged rows; per member a redo if the branch is gone. */
  async function commitGroupMysql(spec: PipelineSpec, group: number, members: GroupMember[], p: PreparedGroupEpoch): Promise<MysqlCommitOutcome> {
    const started = Date.now();
    const lead = p.members[0]!;
    const at = { partition: group, epoch: p.groupEpoch };
    await ctx.hit('commit.mysql', at);
    const r = await commitDecided(ctx, p.xid, { pipeline: spec.name, partition: lead.id, epoch: lead.epoch });
    if (r === 'gone') {
      let outcome: MysqlCommitOutcome = 'committed';
      for (const m of p.members) {
        if ((await redoMysqlSide(ctx, spec, m.id, { epoch: m.epoch, start: m.start, end: m.end, xid: p.xid }, srcOf(spec, members.find((x) => x.id === m.id)!))) === 'redone') outcome = 'redone';
      }
      return outcome;
    }
    await ctx.hit('commit.mysql-committed', at);
    await applyEpoch(ctx, spec, lead.id, lead.epoch);
    for (const m of p.members) await finishMysqlSide(ctx, spec, m.id, m.epoch, started, { applied: true });
    return 'committed';
  }

  /** Both sides of a decided group epoch; each is idempotent. Kafka 'aborted': the caller redoes it (redoGroupKafka). */
  async function commitGroup({ spec, group, members, prepared: p }: GroupCommitArgs): Promise<GroupCommitResult> {
    const started = Date.now();
    await ctx.hit('commit.before', { partition: group, epoch: p.groupEpoch });
    const lead = p.members[0]!;
    const [kafka, mysql] = await Promise.all([
      commitOrFindOut(cluster, spec, lead.id, memberEpoch(p, lead), ctx.heartbeat).then(async (k) => {
        if (k === 'committed') for (const m of p.members) ctx.observe({ kind: 'committed', pipeline: spec.name, partition: m.id, epoch: m.epoch, side: 'kafka', ms: Date.now() - started, startedAt: started });
        await ctx.hit('commit.between', { partition: group, epoch: p.groupEpoch });
        return k;
      }),
      commitGroupMysql(spec, group, members, p),
    ]);
    return { kafka, mysql };
  }

  return {
    async prepareGroup(args: GroupPrepareArgs): Promise<GroupPrepareResult> {
      return edge(() => prepareGroup(args), { decided: false });
    },

    /** Commits group epoch e and prepares e+1 (src/activities/advance.ts says why in one activity). */
    async advanceGroup(args: GroupAdvanceArgs): Promise<GroupAdvanceResult> {
      return edge(() => {
        const { spec, group, members, prepared } = args;
        const lead = prepared.members[0]!;
        return overlap<GroupCommitResult, GroupPrepareResult>(
          () => commitGroup(args),
          (givenUp) =>
            prepareGroup(
              { spec, group, members, groupEpoch: prepared.groupEpoch + 1, positions: advancePositions(args.positions, prepared), noWait: args.noWait, afterCommitOf: { id: lead.id, epoch: lead.epoch } },
              givenUp,
            ),
          (next) => (next.kind === 'prepared' ? commit.withdraw({ spec, prepared: next }) : Promise.resolve()),
        );
      });
    },

    async commitGroup(args: GroupCommitArgs): Promise<GroupCommitResult> {
      return edge(() => commitGroup(args));
    },

    /**
     * The broker aborted the group epoch's transaction: each member's part is produced again in
     * a transaction of its own (redoKafkaSide, the ungrouped redo: it first checks that no
     * earlier redo committed it). Members are independent streams, so their redos need not be
     * one transaction; each keeps its own order, and the group's next epoch follows them.
     */
    async redoGroupKafka({ spec, group, members, prepared: p }: GroupCommitArgs): Promise<void> {
      return edge(async () => {
        await ctx.hit('redo.start', { partition: group, epoch: p.groupEpoch });
        for (const m of p.members) {
          await redoKafkaSide(ctx, spec, m.id, { epoch: m.epoch, start: m.start, end: m.end, xid: p.xid, markerFrom: m.markerOffset }, srcOf(spec, members.find((x) => x.id === m.id)!));
        }
      });
    },

    /**
     * Before a group runs epochs, and for members that join it: the group's transaction and
     * branches are settled (fenced; a branch a member's marker names is committed, others rolled
     * back), then every member goes through the ungrouped reconcile. `joining`: the group runs
     * (its own epoch may be in flight), so only the joining members' state is touched.
     */
    async reconcileGroup(args: GroupReconcileArgs & { joining?: boolean }): Promise<GroupReconcileResult> {
      return edge(async () => {
        const { spec, group, members } = args;
        const token = attemptToken();
        const recovered: string[] = [];
        if (!args.joining) await settleGroupKafka(cluster, spec, group);
        await mapLimit(members, RECOVERY_LANES, (m) => settleKafka(cluster, spec, m.id, ctx.heartbeat));
        if (!args.joining) {
          // This group's branches, and those of groups that no longer exist (parallelism lowered).
          const parallelism = spec.parallelism ?? 1;
          const ids = members.map((m) => m.id);
          const decisions = await examineGroupBranches(pool, spec, (g) => g === group || g >= parallelism, () => namedXids(cluster, spec, ids), token);
          recovered.push(...(await resolveGroupBranches(pool, spec, decisions)));
        }
        // Members are independent from here on (their own ids, markers, branches and rows).
        const reconciled = await mapLimit(members, RECOVERY_LANES, (m) => {
          const expected = args.expected?.find((e) => e.id === m.id);
          return reconcilePartition(ctx, { spec, partition: m.id, source: m.source, ...(expected ? { expected: { epoch: expected.epoch, offset: expected.offset } } : {}) }, token);
        });
        const positions = members.map((m, i) => ({ id: m.id, epoch: reconciled[i]!.epoch, offset: reconciled[i]!.offset }));
        for (const r of reconciled) recovered.push(...(r.recovered ?? []));
        return { positions, ...(recovered.length ? { recovered } : {}) };
      });
    },

  };
}
