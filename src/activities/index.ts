/**
 * The epoch protocol's activities (DESIGN §2–§4), built from injected clients:
 *   createActivities({ cluster, admin, pool, transforms })
 * Clients are created once per worker and stay warm; nothing here is per epoch but the
 * transaction itself.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import { ConfigError, OnceflowError, ReconcileMismatch, TransientError } from '../errors';
import { Faults, type FaultPoint } from '../faults';
import { PreparedTransaction, earliestOffset, endTxn, latestOffset, ISOLATION, type KafkaCluster } from '../kafka/internals';
import { committedMarkers, encodeMarker, findCommittedMarker, lastCommittedMarker, waitDecided, type Marker } from '../kafka/progress';
import { createTableSql, detectDialect, inLocalTransaction, writeRows, type Dialect } from '../mysql/sink';
import { applyStaged, ensureStagedTable, ensureStageTable, mysqlMode, pendingEpochs, stageRows } from '../mysql/stage';
import {
  ER_DUP_ENTRY,
  ER_NO_SUCH_TABLE,
  commitBranch,
  ensureLedger,
  epochGtrid,
  insertLedger,
  lastLedgerRow,
  ledgerRow,
  parseGtrid,
  partitionGtridPrefix,
  prepareBranch,
  recoverXids,
  rollbackXid,
  sqlErrno,
  xidFromString,
  xidToString,
} from '../mysql/xa';
import type {
  CommitArgs,
  EpochArgs,
  KafkaCommitOutcome,
  MysqlCommitOutcome,
  PrepareResult,
  ReconcileArgs,
  ReconcileResult,
} from '../protocol';
import { consumerGroupId, transactionalId, type PipelineSpec } from '../spec';
import type { TransformRegistry } from '../transforms/registry';
import { applyTransform, tableMap, type Applied, type KafkaMessage } from './apply';
import { readEpoch, readRange } from './source';
import type { ObservedEvent, PrepareSplit } from './observe';

export interface ActivityDeps {
  cluster: KafkaCluster;
  admin: Admin;
  pool: Pool;
  transforms: TransformRegistry;
  faults?: Faults;
  /** Observer for metrics (records, phases, redos); optional. */
  observe?: (event: ObservedEvent) => void;
}

/**
 * Arguments of prepareEpoch. `afterCommitOf`: the previous epoch of the partition may still be
 * committing (pipelined epochs); its prepared XA branch holds row locks on the keys this epoch
 * writes, so this prepare opens its own branch only once that epoch's ledger row is committed.
 * (Blocking on the locks instead would deadlock when the previous epoch's MySQL side must be
 * redone: the redo would wait for this branch's locks, this branch for the redo's commit.)
 */
export type PrepareArgs = EpochArgs & { afterCommitOf?: number };

const CHUNK = 1000;
/** Bytes of records per produce request: below the broker's default message.max.bytes (1 MiB) per batch. */
const REQUEST_BYTES = 512 * 1024;
const messageBytes = (m: KafkaMessage) =>
  64 + (m.key?.length ?? 0) + (m.value?.length ?? 0) + (m.headers ? Object.entries(m.headers).reduce((a, [k, v]) => a + k.length + v.length, 0) : 0);
const DECIDE_TIMEOUT_MS = 120_000;

/** Maps onceflow's errors to Temporal failures at the activity edge; keeps the worker heartbeating. */
async function edge<T>(fn: () => Promise<T>): Promise<T> {
  const ctx = Context.current();
  const timer = setInterval(() => ctx.heartbeat(), 1000);
  ctx.heartbeat();
  try {
    return await fn();
  } catch (e) {
    if (e instanceof OnceflowError && !e.retryable) {
      throw ApplicationFailure.create({ message: e.message, type: e.name, nonRetryable: true, details: [e.details] });
    }
    if (e instanceof OnceflowError) throw ApplicationFailure.create({ message: e.message, type: e.name, details: [e.details] });
    throw e;
  } finally {
    clearInterval(timer);
  }
}

function attempt(): number {
  return Context.current().info.attempt;
}

export function createActivities(deps: ActivityDeps) {
  const { cluster, admin, pool, transforms } = deps;
  const faults = deps.faults ?? new Faults();
  const observe = deps.observe ?? (() => undefined);
  let dialect: Dialect | undefined;
  const getDialect = async () => (dialect ??= await detectDialect(pool));
  const hit = (point: FaultPoint, a: { partition: number; epoch: number }) => faults.hit(point, { ...a, attempt: attempt() });
  const heartbeat = () => Context.current().heartbeat();

  /**
   * An epoch's Kafka side inside its transaction: outputs and dead letters in requests of up to
   * REQUEST_BYTES, the progress marker with the last request, then the source offsets.
   * Returns the marker's offset.
   */
  async function sendEpoch(txn: PreparedTransaction, spec: PipelineSpec, partition: number, applied: Pick<Applied, 'outputs' | 'deadLetters'>, m: Marker): Promise<number> {
    const all = [...applied.outputs.map((msg) => ({ topic: spec.kafkaSink.topic, msg })), ...applied.deadLetters.map((msg) => ({ topic: spec.deadLetterTopic, msg }))];
    let markerOffset: number | undefined;
    let i = 0;
    do {
      const out: KafkaMessage[] = [];
      const dl: KafkaMessage[] = [];
      let bytes = 0;
      for (; i < all.length && (bytes === 0 || bytes < REQUEST_BYTES); i++) {
        const x = all[i]!;
        (x.topic === spec.kafkaSink.topic ? out : dl).push(x.msg);
        bytes += messageBytes(x.msg);
      }
      const last = i >= all.length;
      const res = await txn.send([
        { topic: spec.kafkaSink.topic, messages: out },
        { topic: spec.deadLetterTopic, messages: dl },
        ...(last ? [{ topic: spec.progressTopic, messages: [{ key: String(partition), value: encodeMarker(m), partition }] }] : []),
      ]);
      if (last) markerOffset = res.find((r) => r.topic === spec.progressTopic && r.partition === partition)?.baseOffset;
      heartbeat();
    } while (i < all.length);
    if (markerOffset === undefined) throw new Error('progress marker was not acknowledged');
    await txn.sendOffsets(consumerGroupId(spec.name), spec.source.topic, partition, m.end);
    return markerOffset;
  }

  /** Waits until the ledger row of `epoch` is committed (pipelined epochs, see PrepareArgs). */
  async function awaitLedger(spec: PipelineSpec, partition: number, epoch: number): Promise<void> {
    for (let delay = 2; !(await ledgerRow(pool, spec.name, partition, epoch)); delay = Math.min(50, delay * 2)) {
      heartbeat();
      await sleep(delay);
    }
  }

  function transformCtx(spec: PipelineSpec, partition: number, epoch: number) {
    return { pipeline: spec.name, partition, epoch, attempt: attempt(), options: spec.transformOptions ?? {} };
  }

  /** Phase 3, Kafka side: EndTxn(commit) from any worker; ambiguous answers resolved by the progress marker. */
  async function commitKafkaSide(args: CommitArgs): Promise<KafkaCommitOutcome> {
    const { spec, partition, prepared } = args;
    const started = Date.now();
    const at = { partition, epoch: prepared.epoch };
    await hit('commit.before', at);
    const outcome = await endTxn(cluster, prepared.kafka, true);
    if (outcome === 'ok') {
      observe({ kind: 'committed', pipeline: spec.name, partition, epoch: prepared.epoch, side: 'kafka', ms: Date.now() - started, startedAt: started });
      await hit('commit.between', at);
      return 'committed';
    }
    // Fenced or invalid state: committed earlier (and the id moved on) or aborted (timeout). Read the marker.
    const marker = await findCommittedMarker(cluster, spec.progressTopic, partition, prepared.epoch, prepared.kafka.markerOffset, {
      timeoutMs: DECIDE_TIMEOUT_MS,
      onWait: heartbeat,
    });
    return marker ? 'committed' : 'aborted';
  }

  /**
   * Phase 3, MySQL side: XA COMMIT from any connection, then the staged rows into the tables
   * (once; see src/mysql/stage.ts). A vanished branch without ledger row is redone directly.
   */
  async function commitMysqlSide(args: CommitArgs): Promise<MysqlCommitOutcome> {
    const { spec, partition, prepared } = args;
    const started = Date.now();
    await hit('commit.mysql', { partition, epoch: prepared.epoch });
    let r = await commitBranch(pool, xidFromString(prepared.xid), { pipeline: spec.name, partition, epoch: prepared.epoch });
    // Attached: the preparing worker's session is still closing (it was destroyed right after
    // XA PREPARE). That clears within milliseconds; look again shortly before an activity retry.
    for (let i = 0; r === 'attached' && i < 40; i++) {
      await sleep(25);
      r = await commitBranch(pool, xidFromString(prepared.xid), { pipeline: spec.name, partition, epoch: prepared.epoch });
    }
    if (r === 'attached') throw new TransientError(`XA branch ${prepared.xid} is still attached to its preparing session; retrying`);
    if (r === 'committed' || r === 'already') {
      await hit('commit.mysql-committed', { partition, epoch: prepared.epoch });
      // Only a staged run's epochs staged rows (and only its start created onceflow_staged).
      const applyFrom = Date.now();
      if (mysqlMode(spec) === 'staged') await applyStaged(pool, { pipeline: spec.name, partition, epoch: prepared.epoch }, spec.mysqlSink.tables);
      observe({ kind: 'committed', pipeline: spec.name, partition, epoch: prepared.epoch, side: 'mysql', ms: Date.now() - started, startedAt: started, applyMs: Date.now() - applyFrom });
      return 'committed';
    }
    // 'gone': rolled back behind our back. The ledger row decides; redo the MySQL side in a local transaction.
    const records = await readRange(cluster, spec.source.topic, partition, prepared.start, prepared.end, heartbeat);
    const applied = applyTransform(spec, transforms.get(spec.transform, spec.name), records, transformCtx(spec, partition, prepared.epoch), tableMap(spec));
    const outcome = await inLocalTransaction(pool, async (conn) => {
      try {
        await insertLedger(conn, spec.name, partition, { epoch: prepared.epoch, start: prepared.start, end: prepared.end, records: records.length, redo: true });
      } catch (e) {
        // Another attempt redid it first: the ledger row is the truth.
        if (sqlErrno(e) === ER_DUP_ENTRY) return 'committed' as const;
        throw e;
      }
      await writeRows(conn, applied.rows, tableMap(spec), await getDialect());
      return 'redone' as const;
    });
    if (outcome === 'committed') return 'committed';
    observe({ kind: 'redo', pipeline: spec.name, partition, side: 'mysql' });
    return 'redone';
  }

  return {
    /** Checks the source, creates missing sink/progress/dead-letter topics and tables; returns the partition count. */
    async describeSource(spec: PipelineSpec): Promise<{ partitions: number }> {
      return edge(async () => {
        const existing = new Set(await admin.listTopics());
        if (!existing.has(spec.source.topic)) {
          throw new ConfigError('source.topic', `'${spec.source.topic}' does not exist on the brokers; create it or fix the pipeline definition`);
        }
        const meta = await admin.fetchTopicMetadata({ topics: [spec.source.topic] });
        const partitions = meta.topics[0]?.partitions.length ?? 0;
        const wanted: [string, string][] = [
          ['kafkaSink.topic', spec.kafkaSink.topic],
          ['deadLetterTopic', spec.deadLetterTopic],
          ['progressTopic', spec.progressTopic],
        ];
        const missing = wanted.filter(([, t]) => !existing.has(t)).map(([, t]) => t);
        if (missing.length) {
          await admin.createTopics({ waitForLeaders: true, topics: missing.map((topic) => ({ topic, numPartitions: partitions, replicationFactor: -1 })) });
        }
        const sinkMeta = await admin.fetchTopicMetadata({ topics: wanted.map(([, t]) => t) });
        for (const [field, t] of wanted) {
          const n = sinkMeta.topics.find((x) => x.name === t)?.partitions.length ?? 0;
          if (n < partitions) {
            throw new ConfigError(field, `topic '${t}' has ${n} partitions but the source has ${partitions}; onceflow writes each source partition's output to the same partition number. Add partitions to '${t}' or use another topic`);
          }
        }
        for (const [n, t] of spec.mysqlSink.tables.entries()) {
          const ddl = createTableSql(t);
          if (ddl) await pool.query(ddl);
          try {
            if (mysqlMode(spec) === 'staged') await ensureStageTable(pool, t);
          } catch (e) {
            if (sqlErrno(e) !== ER_NO_SUCH_TABLE) throw e;
            throw new ConfigError(`mysqlSink.tables[${n}].name`, `table '${t.name}' does not exist in the database; create it, or give its DDL under 'create'`);
          }
        }
        await ensureLedger(pool);
        await ensureStagedTable(pool);
        return { partitions };
      });
    },

    /** DESIGN §3.5: workflow state, ledger and progress marker must agree; leftovers of undecided epochs are rolled back. */
    async reconcile(args: ReconcileArgs): Promise<ReconcileResult> {
      return edge(async () => {
        const { spec, partition, expected } = args;
        // No epoch of this partition awaits a decision now (fresh start, or continue-as-new after
        // its last commit). Fence every transactional id of the partition: InitProducerId aborts
        // a transaction a crashed run left open and returns only once earlier commits and aborts
        // are complete, so the progress topic's LSO can pass them. Then read the last marker only
        // once the partition is fully decided (EndTxn returns before its markers are written).
        for (let slot = 0; slot < spec.kafkaSink.transactionalIdPool; slot++) {
          await new PreparedTransaction(cluster, transactionalId(spec.name, partition, slot), spec.kafkaSink.transactionTimeoutMs).begin();
        }
        const hw = await latestOffset(cluster, spec.progressTopic, partition, ISOLATION.READ_UNCOMMITTED);
        if (hw > 0) await waitDecided(cluster, spec.progressTopic, partition, hw - 1, { timeoutMs: DECIDE_TIMEOUT_MS, onWait: heartbeat });
        const ledger = await lastLedgerRow(pool, spec.name, partition);
        const logStart = await earliestOffset(cluster, spec.progressTopic, partition);
        const marker = await lastCommittedMarker(cluster, spec.progressTopic, partition, logStart);
        const prepared = await recoverXids(pool, partitionGtridPrefix(spec.name, partition));
        const evidence = {
          ledger,
          marker: marker && { epoch: marker.epoch, start: marker.start, end: marker.end, offset: marker.offset },
          workflow: expected ?? null,
          preparedXaBranches: prepared.map(xidToString),
        };
        let next: { epoch: number; offset: number };
        if (!ledger && !marker) {
          const offset =
            spec.source.startFrom === 'earliest'
              ? await earliestOffset(cluster, spec.source.topic, partition)
              : await latestOffset(cluster, spec.source.topic, partition, ISOLATION.READ_COMMITTED);
          next = { epoch: 0, offset };
        } else if (ledger && marker && ledger.epoch === marker.epoch && ledger.end === marker.end) {
          next = { epoch: ledger.epoch + 1, offset: ledger.end };
        } else {
          throw new ReconcileMismatch(
            `pipeline ${spec.name} partition ${partition}: the MySQL ledger says ${ledger ? `epoch ${ledger.epoch} ended at offset ${ledger.end}` : 'no epoch committed'}, ` +
              `the Kafka progress marker says ${marker ? `epoch ${marker.epoch} ended at offset ${marker.end}` : 'no epoch committed'}. ` +
              'One side of an epoch committed without the other (for example a workflow was terminated between the two commits). ' +
              'Inspect with `onceflow transactions`, then resolve before starting again.',
            evidence,
          );
        }
        if (expected && (expected.epoch !== next.epoch || expected.offset !== next.offset)) {
          throw new ReconcileMismatch(
            `pipeline ${spec.name} partition ${partition}: workflow state says epoch ${expected.epoch} at offset ${expected.offset}, ledger and progress marker say epoch ${next.epoch} at offset ${next.offset}`,
            evidence,
          );
        }
        // Branches of epochs at or after the next one were never decided by a running workflow: roll back.
        const rolledBack: string[] = [];
        for (const x of prepared) {
          const g = parseGtrid(x.gtrid);
          if (g && g.epoch >= next.epoch) {
            await rollbackXid(pool, x);
            rolledBack.push(xidToString(x));
          }
        }
        // Epochs whose XA branch committed but whose staged rows were not applied (the commit
        // activity was cut off, e.g. the workflow was terminated): apply them now, in order.
        const applied: number[] = [];
        for (const x of await pendingEpochs(pool, spec.name, partition)) {
          if (await applyStaged(pool, { pipeline: spec.name, partition, epoch: x.epoch }, spec.mysqlSink.tables)) applied.push(x.epoch);
        }
        return { ...next, rolledBack, ...(applied.length ? { applied } : {}) };
      });
    },

    /** Phase 1: read [offset, end), pre-commit the Kafka transaction and the XA branch. */
    async prepareEpoch(args: PrepareArgs): Promise<PrepareResult> {
      return edge(async () => {
        const { spec, partition, epoch, offset } = args;
        const started = Date.now();
        const at = { partition, epoch };
        await hit('prepare.start', at);
        if (attempt() > 1) {
          // A retried prepare: roll back this epoch's branches left by earlier attempts. (An epoch
          // whose prepare result is in history is never prepared again, so none of these is decided.)
          for (const x of await recoverXids(pool, epochGtrid(spec.name, partition, epoch))) {
            if (x.gtrid !== epochGtrid(spec.name, partition, epoch)) continue;
            if ((await rollbackXid(pool, x)) === 'rolled-back') observe({ kind: 'rolled-back', pipeline: spec.name, partition, epoch, xid: xidToString(x) });
          }
          observe({ kind: 'retry', pipeline: spec.name, partition, activity: 'prepareEpoch' });
        }
        const waitMs = args.noWait ? 0 : spec.epoch.maxWaitMs;
        const { records, end, sourceEnd } = await readEpoch(cluster, spec.source.topic, partition, offset, spec.epoch, waitMs, heartbeat);
        if (end === offset) return { kind: 'empty', offset };
        const split: PrepareSplit = { readMs: Date.now() - started, initMs: 0, transformMs: 0, kafkaMs: 0, previousCommitWaitMs: 0, mysqlMs: 0, xaPrepareMs: 0 };
        const timed = async <T>(k: keyof PrepareSplit, fn: () => Promise<T> | T): Promise<T> => {
          const t0 = Date.now();
          try {
            return await fn();
          } finally {
            split[k] += Date.now() - t0;
          }
        };

        const transform = transforms.get(spec.transform, spec.name);
        const tables = tableMap(spec);
        const d = await getDialect();
        const ctx = transformCtx(spec, partition, epoch);
        const marker: Marker = { pipeline: spec.name, partition, epoch, start: offset, end, records: records.length, redo: false };
        // Transform, then Kafka, then MySQL: the XA branch holds its row locks until its commit,
        // and other partitions' epochs wait on them, so it opens last and stays open briefly.
        const applied = await timed('transformMs', () => applyTransform(spec, transform, records, ctx, tables));
        const deadLetters = applied.deadLetters.length;
        // InitProducerId on this epoch's transactional id: fences zombies and aborts their open transaction.
        const txn = new PreparedTransaction(cluster, transactionalId(spec.name, partition, epoch % spec.kafkaSink.transactionalIdPool), spec.kafkaSink.transactionTimeoutMs);
        const handle = await timed('initMs', () => txn.begin());
        const markerOffset = await timed('kafkaMs', () => sendEpoch(txn, spec, partition, applied, marker));
        await hit('prepare.kafka-sent', at);
        const staged = mysqlMode(spec) === 'staged';
        // Direct writes lock the target rows, which the previous epoch's prepared branch may still
        // hold: open this branch only once that epoch committed. Staged writes lock nothing shared.
        if (!staged && args.afterCommitOf !== undefined) await timed('previousCommitWaitMs', () => awaitLedger(spec, partition, args.afterCommitOf!));
        const xid = { gtrid: epochGtrid(spec.name, partition, epoch), bqual: `a${attempt()}.${randomBytes(4).toString('hex')}` };
        let bodyDone = 0;
        await prepareBranch(
          pool,
          xid,
          async (conn) => {
            if (staged) await timed('mysqlMs', () => stageRows(conn, { pipeline: spec.name, partition, epoch }, applied.rows, tables));
            else await timed('mysqlMs', () => writeRows(conn, applied.rows, tables, d));
            // The transform's own sink sees the processed records once both sides hold them.
            for (let i = 0; i < applied.processed.length; i += CHUNK) {
              transform.sink?.(applied.processed.slice(i, i + CHUNK), { ...ctx, writtenInAttempt: Math.min(i + CHUNK, applied.processed.length) });
            }
            await timed('mysqlMs', () => insertLedger(conn, spec.name, partition, { epoch, start: offset, end, records: records.length, redo: false }));
            bodyDone = Date.now();
          },
          { afterPrepare: () => hit('prepare.xa-prepared', at) },
        );
        split.xaPrepareMs = Date.now() - bodyDone;
        observe({ kind: 'prepared', pipeline: spec.name, partition, epoch, records: records.length, deadLetters, ms: Date.now() - started, end, lag: Math.max(0, sourceEnd - end), startedAt: started, split });
        return {
          kind: 'prepared',
          epoch,
          start: offset,
          end,
          records: records.length,
          deadLetters,
          kafka: { ...handle, markerOffset },
          xid: xidToString(xid),
        };
      });
    },

    /** Phase 3, Kafka side alone (runs scheduled before commitEpoch existed). */
    async commitKafka(args: CommitArgs): Promise<KafkaCommitOutcome> {
      return edge(() => commitKafkaSide(args));
    },

    /** Phase 3, MySQL side alone (runs scheduled before commitEpoch existed). */
    async commitMysql(args: CommitArgs): Promise<MysqlCommitOutcome> {
      return edge(() => commitMysqlSide(args));
    },

    /**
     * Phase 3: both commits at once, in one activity (one dispatch and one completion less per
     * epoch than two). Each side is idempotent, so a retry after one side failed redoes nothing
     * the other side did.
     */
    async commitEpoch(args: CommitArgs): Promise<{ kafka: KafkaCommitOutcome; mysql: MysqlCommitOutcome }> {
      return edge(async () => {
        const [kafka, mysql] = await Promise.all([commitKafkaSide(args), commitMysqlSide(args)]);
        return { kafka, mysql };
      });
    },

    /**
     * Withdraws a prepared epoch that was never committed: fences its transactional id
     * (InitProducerId aborts the open transaction) and rolls back its XA branch. The workflow
     * uses it for a pipelined epoch e+1 when epoch e must be redone, so that e's redo lands in
     * the output log before e+1 and source order holds; e+1 is then prepared again.
     */
    async abortPrepared(args: CommitArgs): Promise<void> {
      return edge(async () => {
        const { spec, prepared } = args;
        await new PreparedTransaction(cluster, prepared.kafka.transactionalId, spec.kafkaSink.transactionTimeoutMs).begin();
        await rollbackXid(pool, xidFromString(prepared.xid));
      });
    },

    /**
     * The broker aborted the prepared transaction (timeout): produce the epoch again in a fresh
     * transaction and commit it. First fence the id and check definitively that no transaction
     * of this epoch committed (an earlier redo attempt may have).
     */
    async redoKafka(args: CommitArgs): Promise<{ redone: boolean }> {
      return edge(async () => {
        const { spec, partition, prepared } = args;
        await hit('redo.start', { partition, epoch: prepared.epoch });
        const txn = new PreparedTransaction(cluster, prepared.kafka.transactionalId, spec.kafkaSink.transactionTimeoutMs);
        // InitProducerId completes every earlier transaction of this id (aborting an open one) before it returns.
        const handle = await txn.begin();
        const done = (await committedMarkers(cluster, spec.progressTopic, partition, prepared.kafka.markerOffset)).some((m) => m.epoch === prepared.epoch);
        if (done) return { redone: false };
        const records = await readRange(cluster, spec.source.topic, partition, prepared.start, prepared.end, heartbeat);
        const applied = applyTransform(spec, transforms.get(spec.transform, spec.name), records, transformCtx(spec, partition, prepared.epoch), tableMap(spec));
        await sendEpoch(txn, spec, partition, applied, { pipeline: spec.name, partition, epoch: prepared.epoch, start: prepared.start, end: prepared.end, records: records.length, redo: true });
        const outcome = await endTxn(cluster, handle, true);
        if (outcome !== 'ok') throw new TransientError(`redo transaction of epoch ${prepared.epoch} was not committed (${outcome}); retrying the redo`);
        observe({ kind: 'redo', pipeline: spec.name, partition, side: 'kafka' });
        return { redone: true };
      });
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
export type { ObservedEvent, PrepareSplit } from './observe';
