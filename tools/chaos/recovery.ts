/**
 * Measuring a fault's recovery: progress as the ledger shows it (read directly, never through a
 * proxy), until every affected partition committed an epoch prepared after the fault; then the
 * XA branches of committed epochs still prepared, and on a cluster the wait until it is whole.
 */
import type { RowDataPacket } from 'mysql2/promise';
import { partitionStatus } from '../../src/client';
import { earliestOffset, ISOLATION, latestOffset } from '../../src/kafka/internals';
import { committedMarkers, waitDecided } from '../../src/kafka/progress';
import { recoverXids } from '../../src/mysql/branch';
import { ledgerRow } from '../../src/mysql/ledger';
import { parseGroupGtrid, parseGtrid, pipelineGtridPrefix, xidToString, type Xid } from '../../src/mysql/xid';
import { clusterWhole } from './cluster';
import { sleep, type CampaignEnv } from './setup';
import type { FaultRecord } from './types';
import type { PlannedFault } from './schedule';

/** The ledger of the campaign's pipeline, and the XA branches it left prepared. */
export class LedgerProbe {
  constructor(private readonly env: CampaignEnv) {}

  /** The last epoch per partition with a ledger row. */
  readonly ledgerMax = async (): Promise<Map<number, number>> => {
    const [rows] = await this.env.pool.query<RowDataPacket[]>(
      'SELECT source_partition AS p, MAX(epoch) AS e FROM onceflow_ledger WHERE pipeline = ? GROUP BY source_partition',
      [this.env.name],
    );
    return new Map(rows.map((r) => [Number(r.p), Number(r.e)]));
  };

  readonly dbNow = async (): Promise<string> => {
    const [rows] = await this.env.pool.query<RowDataPacket[]>('SELECT NOW(3) AS now');
    return String(rows[0]!.now);
  };

  /** First epoch per partition whose ledger row was written (in prepare) after `since` and is committed. */
  async progressedSince(since: string): Promise<Map<number, number>> {
    const [rows] = await this.env.pool.query<RowDataPacket[]>(
      'SELECT source_partition AS p, MIN(epoch) AS e FROM onceflow_ledger WHERE pipeline = ? AND committed_at > ? GROUP BY source_partition',
      [this.env.name, since],
    );
    return new Map(rows.map((r) => [Number(r.p), Number(r.e)]));
  }

  /**
   * Prepared branches of committed epochs, right after a recovery. A listed branch that a
   * committed progress marker names, and whose own ledger row is visible, is not counted: it is
   * the decided branch, and its XA COMMIT is in flight. MariaDB's XA COMMIT of a detached branch makes its rows (the epoch's ledger
   * row among them) visible before it drops the xid from what XA RECOVER lists (`trans_xa_commit`
   * in its sql/xa.cc: the engine's commit, then `xid_cache_delete`), so the probe can see both;
   * seed 20261214 (2026-12-07) did, 0.2 s after a 23 s MariaDB freeze, as seed 284101 had on
   * 2026-12-01. Any other prepared branch of a committed epoch is left behind and counts: the
   * branch that committed the epoch's ledger row is the only one that can have written it.
   */
  readonly danglingNow = async (): Promise<{ left: string[]; committing: string[] }> => {
    const { env } = this;
    const max = await this.ledgerMax();
    // A group's epochs below its workflow's group epoch counter have been committed (the counter
    // moves on only after the commit activity returned); asked before XA RECOVER, so a branch
    // counted here was of a committed group epoch when it was listed.
    const groupNext = new Map<number, number>();
    if (env.grouped)
      for (let g = 0; g < env.spec.parallelism!; g++) groupNext.set(g, (await env.groupStatus(g)).groupEpoch);
    const prepared = await recoverXids(env.pool, pipelineGtridPrefix(env.name));
    const ofCommitted = prepared.filter((x) => {
      const gg = parseGroupGtrid(x.gtrid);
      if (gg !== null) return gg.pipeline === env.name && gg.groupEpoch < (groupNext.get(gg.group) ?? 0);
      const g = parseGtrid(x.gtrid);
      return g !== null && g.epoch <= (max.get(g.partition) ?? -1);
    });
    const left: string[] = [];
    const committing: string[] = [];
    for (const x of ofCommitted) ((await this.committingNow(x)) ? committing : left).push(xidToString(x));
    return { left, committing };
  };

  /**
   * Whether the branch is being committed: a committed progress marker of its partition (a group
   * branch: of one of the group's members) names it — read once the progress partition's open
   * transactions are decided, within 30 s — and the ledger row of that marker's epoch, which
   * only this branch can have written, is visible. A decided branch whose row is not there was
   * not committed, and counts.
   */
  private async committingNow(x: Xid): Promise<boolean> {
    const { cluster, spec } = this.env;
    const xid = xidToString(x);
    const gg = parseGroupGtrid(x.gtrid);
    const partitions = gg ? this.env.membersOf(gg.group) : [parseGtrid(x.gtrid)!.partition];
    for (const p of partitions) {
      const hw = await latestOffset(cluster, spec.progressTopic, p, ISOLATION.READ_UNCOMMITTED);
      if (hw > 0) {
        const decided = await waitDecided(cluster, spec.progressTopic, p, hw - 1, { timeoutMs: 30_000 }).then(
          () => true,
          () => false,
        );
        if (!decided) continue;
      }
      const from = await earliestOffset(cluster, spec.progressTopic, p);
      const named = (await committedMarkers(cluster, spec.progressTopic, p, from)).find((m) => m.xid === xid);
      if (named) return (await ledgerRow(this.env.pool, spec.name, p, named.epoch)) !== null;
    }
    return false;
  }
}

/** Where a fault's recovery is measured from: the ledger before it, the database clock and the time, and the partitions it affects. */
export class FaultWindow {
  t0 = 0;
  since = '';
  before = new Map<number, number>();
  partitions: number[] = [];

  constructor(private readonly ledger: LedgerProbe) {}

  async snapshot(): Promise<void> {
    this.before = await retryDb(this.ledger.ledgerMax);
    this.since = await retryDb(this.ledger.dbNow);
    this.t0 = Date.now();
  }
}

/**
 * Waits until every affected partition committed an epoch that was prepared after the fault, and
 * records the recovery on `rec`; the reason the campaign is stuck if one did not within the recovery timeout.
 */
export async function awaitRecovery(
  env: CampaignEnv,
  ledger: LedgerProbe,
  f: PlannedFault,
  rec: FaultRecord,
  win: FaultWindow,
): Promise<string | undefined> {
  const { partitions } = win;
  let progressed = new Map<number, number>();
  const deadline = win.t0 + env.o.recoveryTimeoutMs;
  for (;;) {
    progressed = await ledger.progressedSince(win.since).catch(() => new Map<number, number>());
    if (partitions.every((p) => progressed.has(p))) break;
    if (Date.now() > deadline) break;
    await sleep(200);
  }
  if (!partitions.every((p) => progressed.has(p))) {
    const statuses = await Promise.all(
      partitions.map((p) =>
        partitionStatus(env.client, env.spec, p).then(
          (s) => `partition ${p}: phase ${s.phase}, epoch ${s.state.epoch}, lastError ${s.lastError ?? '-'}`,
          (e) => `partition ${p}: status query failed (${String(e)})`,
        ),
      ),
    );
    const stuck = `#${f.n} ${f.kind} @ ${f.trigger}: no progress within ${env.o.recoveryTimeoutMs} ms after injection at ${rec.at}; ${statuses.join('; ')}`;
    rec.note += stuck;
    env.log(stuck);
    return stuck;
  }
  rec.recoveryMs = Date.now() - win.t0;
  rec.affected = partitions.map((p) => ({
    partition: p,
    afterEpoch: win.before.get(p) ?? -1,
    throughEpoch: progressed.get(p)!,
  }));
  return undefined;
}

/** After a recovery: the prepared branches of committed epochs left, the recovery logged, and on a cluster the wait until it is whole again. */
export async function afterRecovery(
  env: CampaignEnv,
  ledger: LedgerProbe,
  f: PlannedFault,
  rec: FaultRecord,
  planned: number,
  produced: () => number,
): Promise<void> {
  const { log, spec } = env;
  const { left, committing } = await retryDb(ledger.danglingNow);
  rec.danglingAfter = left.length;
  rec.committingAfter = committing.length;
  if (committing.length) rec.note += `listed while their XA COMMIT was in flight: ${committing.join(', ')}; `;
  if (left.length) rec.note += `prepared branches of committed epochs after recovery: ${left.join(', ')}; `;
  if (left.length || committing.length) log(`#${f.n} ${f.kind}: ${rec.note}`);
  log(
    `#${f.n}/${planned} ${f.kind} @ ${f.trigger}${rec.epoch !== undefined ? ` (${rec.group !== undefined ? `group ${rec.group}` : `partition ${f.partition}`} epoch ${rec.epoch}, worker ${rec.hitWorker})` : ''}: recovered in ${(rec.recoveryMs! / 1000).toFixed(1)} s; input ${produced()}${rec.target ? `; ${rec.target}` : ''}`,
  );
  if (env.nodes > 1) {
    // The next node is killed only once every node is back in every ISR: 2 of 3 live at worst.
    const t = Date.now();
    const topics = [
      spec.source.topic,
      spec.kafkaSink.topic,
      spec.deadLetterTopic,
      spec.progressTopic,
      '__transaction_state',
      '__consumer_offsets',
    ];
    const whole = await waitFor(
      'the cluster to be whole again',
      () => clusterWhole(env.admin, env.nodes, topics),
      180_000,
    ).then(
      () => true,
      () => false,
    );
    rec.wholeAgainMs = Date.now() - t;
    if (!whole) {
      rec.note += 'cluster not whole 180 s after the node came back; ';
      log(`#${f.n}: the cluster was not whole again within 180 s`);
    }
  }
}

/** Retries a database read every 200 ms, 600 times at most (a restart of MariaDB is among the faults). */
export async function retryDb<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (e) {
      if (i >= 600) throw e;
      await sleep(200);
    }
  }
}

export async function retryUntil<T>(fn: () => Promise<T>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(500);
    }
  }
}

/** Polls `fn` (an error counts as false) every 250 ms until it is true, for at most `timeoutMs`. */
export async function waitFor(what: string, fn: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await fn().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(250);
  }
}
