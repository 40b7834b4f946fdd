/**
 * The one recovery path of a partition that no workflow is driving: reconcile runs it before a
 * partition workflow starts its epochs, `onceflow transactions` shows it and (--resolve) runs it
 * on a stopped pipeline. It gathers the evidence (last ledger row, last committed progress
 * marker, prepared XA branches, staged rows not yet applied), asks `recoverEpoch`
 * (src/protocol/epoch.ts) what to do with each epoch, and says where the partition resumes.
 */
import type { Pool } from 'mysql2/promise';
import {
  ISOLATION,
  PreparedTransaction,
  earliestOffset,
  latestOffset,
  listTransactions,
  type KafkaCluster,
} from './kafka/internals';
import { DECIDE_TIMEOUT_MS } from './kafka/outcome';
import { splitsInLog, type LoggedSplit } from './kafka/splits-in-log';
import { mapLimit } from './limit';
import { lastCommittedMarker, waitDecided, type Marker } from './kafka/progress';
import { commitBranch, recoverXids, rollbackXid } from './mysql/branch';
import { lastLedgerRow, ledgerRow, type LedgerRow } from './mysql/ledger';
import { pendingEpochs } from './mysql/stage';
import {
  bqualToken,
  parseGroupGtrid,
  parseGtrid,
  partitionGtridPrefix,
  pipelineGroupGtridPrefix,
  xidFromString,
  xidToString,
} from './mysql/xid';
import { recoverEpoch, type EpochEvidence, type RecoveryAction } from './protocol/epoch';
import { groupTransactionalId, parseGroupTransactionalId, transactionalId, type PipelineSpec } from './spec';

/** Partitions a group's recovery works on at once (each a few round trips to Kafka and MySQL). */
export const RECOVERY_LANES = 8;

/**
 * Makes the partition's Kafka side decided, for a recovery that no workflow drives: fences every
 * transactional id of the partition (InitProducerId aborts a transaction a crashed run left open
 * and returns only once earlier commits and aborts are complete), then waits until the progress
 * partition's LSO has passed everything written (EndTxn returns before its markers are written).
 * Returns the ids fenced.
 */
export async function settleKafka(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  onWait?: () => void,
): Promise<string[]> {
  const fenced = await fenceIds(cluster, spec, (slot) => transactionalId(spec.name, partition, slot));
  const hw = await latestOffset(cluster, spec.progressTopic, partition, ISOLATION.READ_UNCOMMITTED);
  if (hw > 0)
    await waitDecided(cluster, spec.progressTopic, partition, hw - 1, {
      timeoutMs: DECIDE_TIMEOUT_MS,
      ...(onWait ? { onWait } : {}),
    });
  return fenced;
}

/**
 * The transactions of the partition's last epochs that Kafka split, found in the log (no history
 * names them: src/kafka/splits-in-log.ts). Reconcile of a restarted pipeline repairs them
 * before it trusts the progress marker; `onceflow transactions` lists them. Call after settleKafka.
 */
export async function loggedSplits(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  partition: number,
  onWait?: () => void,
): Promise<LoggedSplit[]> {
  const start = await earliestOffset(cluster, spec.progressTopic, partition);
  return splitsInLog(
    cluster,
    spec,
    partition,
    await lastCommittedMarker(cluster, spec.progressTopic, partition, start),
    start,
    onWait,
  );
}

/** One line for a split found in the log. */
export function describeSplit(partition: number, s: LoggedSplit): string {
  return `partition ${partition} epoch ${s.marker.epoch}: Kafka split its transaction (producer ${s.split.producerId} epoch ${s.split.producerEpoch}): committed on ${s.split.committed.join(', ')}, aborted on ${s.split.aborted.join(', ')}`;
}

/** Fences every transactional id of a partition group (src/protocol/group.ts): a transaction a crashed group run left open is aborted. */
export async function settleGroupKafka(cluster: KafkaCluster, spec: PipelineSpec, group: number): Promise<string[]> {
  return fenceIds(cluster, spec, (slot) => groupTransactionalId(spec.name, group, slot));
}

/**
 * Fences the transactions left open by partition groups that no longer exist: group ≥
 * spec.parallelism (every group of a pipeline without one), after `parallelism` was lowered
 * or removed. Their ids are not derived from the spec, so the brokers are asked which
 * transactions of the pipeline's group ids are open (ListTransactions); each is fenced
 * (InitProducerId aborts it) instead of holding back its partitions' LSO until the broker's
 * transaction timeout. Their XA branches are decided by the partitions' markers as any
 * group's (examineGroupBranches). Returns what it did, one line each: the ids fenced, and any
 * broker that did not list its transactions (what it coordinates is left to that timeout).
 */
export async function settleGoneGroupsKafka(cluster: KafkaCluster, spec: PipelineSpec): Promise<string[]> {
  const { transactions, failed } = await listTransactions(cluster, ['Ongoing']);
  const ids = transactions
    .map((t) => t.transactionalId)
    .filter((id) => {
      const g = parseGroupTransactionalId(spec.name, id);
      return g !== undefined && g.group >= (spec.parallelism ?? 0);
    });
  await Promise.all(ids.map((id) => new PreparedTransaction(cluster, id, spec.kafkaSink.transactionTimeoutMs).begin()));
  return [
    ...ids.map(
      (id) => `Kafka ${id}: a transaction of a partition group that no longer exists was open; fenced (aborted)`,
    ),
    ...failed.map(
      (f) =>
        `Kafka broker ${f.nodeId} did not list its open transactions (${f.error}); one of a group that no longer exists, if it coordinates any, ends at the broker's transaction timeout`,
    ),
  ];
}

/** InitProducerId on every slot of the id pool (`idOf(slot)`), all at once; returns the ids. */
async function fenceIds(cluster: KafkaCluster, spec: PipelineSpec, idOf: (slot: number) => string): Promise<string[]> {
  const ids = Array.from({ length: spec.kafkaSink.transactionalIdPool }, (_, slot) => idOf(slot));
  await Promise.all(ids.map((id) => new PreparedTransaction(cluster, id, spec.kafkaSink.transactionTimeoutMs).begin()));
  return ids;
}

/**
 * The xids that committed progress markers name: the last committed marker of each source
 * partition id given (call after the Kafka side is settled). A group branch is decided iff a
 * marker of one of its members names it.
 */
export async function namedXids(
  cluster: KafkaCluster,
  spec: PipelineSpec,
  ids: number[],
): Promise<Map<string, { partition: number; epoch: number }>> {
  const named = new Map<string, { partition: number; epoch: number }>();
  const markers = await mapLimit(ids, RECOVERY_LANES, async (id) =>
    lastCommittedMarker(cluster, spec.progressTopic, id, await earliestOffset(cluster, spec.progressTopic, id)),
  );
  for (const [i, m] of markers.entries()) if (m?.xid) named.set(m.xid, { partition: ids[i]!, epoch: m.epoch });
  return named;
}

/** What recovery does with a prepared branch of a partition group, and why. */
export interface GroupBranchDecision {
  xid: string;
  group: number;
  groupEpoch: number;
  do: 'commit' | 'rollback' | 'leave';
  /** For 'commit': the member whose committed progress marker names the branch. */
  by?: { partition: number; epoch: number };
}

/**
 * Decides the prepared XA branches of partition groups that `which` selects and no workflow
 * drives. A branch that a committed marker names (`named`: namedXids of the partitions the
 * caller knows, read only if there is such a branch) is committed: its Kafka side committed.
 * Any other is rolled back, unless an attempt newer than `token` opened it. Rolling back a
 * branch whose deciding marker the caller did not read (a member it does not know, after
 * `parallelism` changed) loses nothing: each member of that epoch then has a committed marker
 * and no ledger row, and its own recovery redoes its MySQL side from the source, the ledger
 * row first (redoMysqlSide).
 */
export async function examineGroupBranches(
  pool: Pool,
  spec: PipelineSpec,
  which: (group: number) => boolean,
  named: () => Promise<Map<string, { partition: number; epoch: number }>>,
  token: number,
): Promise<GroupBranchDecision[]> {
  const branches = (await recoverXids(pool, pipelineGroupGtridPrefix(spec.name))).flatMap((x) => {
    const g = parseGroupGtrid(x.gtrid);
    return g && g.pipeline === spec.name && which(g.group) ? [{ x, g }] : [];
  });
  if (!branches.length) return [];
  const markers = await named();
  return branches.map(({ x, g }) => {
    const xid = xidToString(x);
    const by = markers.get(xid);
    const base = { xid, group: g.group, groupEpoch: g.groupEpoch };
    if (by) return { ...base, do: 'commit' as const, by };
    return { ...base, do: bqualToken(x.bqual) < token ? ('rollback' as const) : ('leave' as const) };
  });
}

/** Carries out examineGroupBranches' decisions; one line each. */
export async function resolveGroupBranches(
  pool: Pool,
  spec: PipelineSpec,
  decisions: GroupBranchDecision[],
): Promise<Done> {
  const done: Done = [];
  for (const d of decisions) {
    const at = `group ${d.group} epoch ${d.groupEpoch}: XA ${d.xid}`;
    if (d.do === 'commit') {
      const r = await commitBranch(pool, xidFromString(d.xid), { pipeline: spec.name, ...d.by! });
      done.push(
        `${at} ${r === 'committed' ? `committed (partition ${d.by!.partition}'s progress marker names it: its Kafka side committed)` : r}`,
      );
    } else if (d.do === 'rollback') {
      done.push(`${at} ${await rollbackXid(pool, xidFromString(d.xid))} (no committed progress marker names it)`);
    } else {
      done.push(`${at} left alone: opened by an attempt newer than this recovery`);
    }
  }
  return done;
}

export interface PartitionFindings {
  partition: number;
  ledger: LedgerRow | null;
  marker: (Marker & { offset: number }) | null;
  /** Where the partition resumes; null on a fresh partition (the source's start offset applies). */
  next: { epoch: number; offset: number } | null;
  /** Why recovery cannot decide (ledger and marker too far apart or disagreeing); set instead of `next`. */
  refuse?: string;
  epochs: { epoch: number; evidence: EpochEvidence; actions: RecoveryAction[] }[];
}

/**
 * Examines a partition. `token`: the caller's fencing token (src/mysql/xid.ts); branches of
 * attempts scheduled after it are left alone. Call settleKafka first when acting on the findings.
 */
export async function examinePartition(
  deps: { cluster: KafkaCluster; pool: Pool },
  spec: PipelineSpec,
  partition: number,
  token: number,
): Promise<PartitionFindings> {
  const ledger = await lastLedgerRow(deps.pool, spec.name, partition);
  const marker = await lastCommittedMarker(
    deps.cluster,
    spec.progressTopic,
    partition,
    await earliestOffset(deps.cluster, spec.progressTopic, partition),
  );
  const L = ledger?.epoch ?? -1;
  const M = marker?.epoch ?? -1;
  let last = -1;
  let end = 0;
  let refuse: string | undefined;
  if (L === M || L === M + 1 || M === L + 1) {
    last = Math.max(L, M);
    if (last >= 0) end = last === L ? ledger!.end : marker!.end;
  } else {
    refuse = `the MySQL ledger's last epoch is ${L < 0 ? 'none' : L}, the Kafka progress marker's ${M < 0 ? 'none' : M}: more than one epoch apart, which no crash of onceflow leaves behind`;
  }

  const branches = new Map<number, { xid: string; token: number }[]>();
  for (const x of await recoverXids(deps.pool, partitionGtridPrefix(spec.name, partition))) {
    const g = parseGtrid(x.gtrid);
    if (!g || g.pipeline !== spec.name || g.partition !== partition) continue;
    branches.set(g.epoch, [...(branches.get(g.epoch) ?? []), { xid: xidToString(x), token: bqualToken(x.bqual) }]);
  }
  const pending = new Set((await pendingEpochs(deps.pool, spec.name, partition)).map((x) => x.epoch));
  // The last epoch always: recoverEpoch judges it (a ledger row and marker of one epoch that
  // name different offsets are refused there, the one place that decides it).
  const epochNumbers = [...new Set([...branches.keys(), ...pending, ...(last >= 0 ? [last] : [])])].sort(
    (a, b) => a - b,
  );

  const epochs: PartitionFindings['epochs'] = [];
  for (const epoch of epochNumbers) {
    let m: EpochEvidence['marker'] = null;
    let l: EpochEvidence['ledger'] = null;
    if (epoch === M && marker) m = { start: marker.start, end: marker.end, ...(marker.xid ? { xid: marker.xid } : {}) };
    if (epoch === L && ledger) l = { start: ledger.start, end: ledger.end };
    if (epoch < Math.min(L, M)) {
      // Both sides committed long ago: any branch left of it is stale.
      const row = await ledgerRow(deps.pool, spec.name, partition, epoch);
      m = l = row ? { start: row.start, end: row.end } : { start: 0, end: 0 };
    } else if (epoch === Math.min(L, M) && L !== M) {
      // The side that is one epoch behind committed this one too.
      m = l = epoch === L ? { start: ledger!.start, end: ledger!.end } : { start: marker!.start, end: marker!.end };
    }
    const evidence: EpochEvidence = {
      epoch,
      marker: m,
      ledger: l,
      branches: branches.get(epoch) ?? [],
      pendingApply: pending.has(epoch),
      token,
    };
    epochs.push({ epoch, evidence, actions: refuse ? [] : recoverEpoch(evidence) });
  }
  // An epoch recoverEpoch will not decide stops the partition as a whole: it never resumes past it.
  refuse ??= epochs.flatMap((e) => e.actions).find((a) => a.do === 'refuse')?.why;
  return {
    partition,
    ledger,
    marker,
    next: refuse || last < 0 ? null : { epoch: last + 1, offset: end },
    ...(refuse ? { refuse } : {}),
    epochs,
  };
}

/** What recovery did, one line per action. */
export type Done = string[];

/**
 * Carries out the actions of `examinePartition`. Redos need the pipeline's transform and run
 * only where `redo` is given (reconcile); elsewhere they are reported as left for reconcile.
 */
export async function carryOut(
  deps: { pool: Pool },
  spec: PipelineSpec,
  f: PartitionFindings,
  handlers: {
    apply: (epoch: number) => Promise<boolean>;
    redo?: (epoch: number, a: Extract<RecoveryAction, { do: 'redo-kafka' | 'redo-mysql' }>) => Promise<void>;
  },
): Promise<Done> {
  const done: Done = [];
  const p = f.partition;
  for (const { epoch, actions } of f.epochs) {
    for (const a of actions) {
      switch (a.do) {
        case 'commit-branch': {
          const r = await commitBranch(deps.pool, xidFromString(a.xid), { pipeline: spec.name, partition: p, epoch });
          done.push(
            `partition ${p} epoch ${epoch}: XA ${a.xid} ${r === 'committed' ? 'committed (the progress marker names it: its Kafka side committed)' : r}`,
          );
          if (r === 'gone')
            throw new Error(
              `partition ${p} epoch ${epoch}: the decided XA branch ${a.xid} vanished while being committed; run again`,
            );
          break;
        }
        case 'rollback-branch':
          done.push(
            `partition ${p} epoch ${epoch}: XA ${a.xid} ${await rollbackXid(deps.pool, xidFromString(a.xid))} (not the decided branch)`,
          );
          break;
        case 'apply-staged':
          if (await handlers.apply(epoch))
            done.push(`partition ${p} epoch ${epoch}: staged rows applied to the tables`);
          break;
        case 'redo-kafka':
        case 'redo-mysql':
          if (handlers.redo) {
            await handlers.redo(epoch, a);
            done.push(
              `partition ${p} epoch ${epoch}: ${a.do === 'redo-kafka' ? 'Kafka' : 'MySQL'} side redone for offsets [${a.start}, ${a.end})`,
            );
          } else {
            done.push(
              `partition ${p} epoch ${epoch}: ${a.do === 'redo-kafka' ? 'MySQL committed it, Kafka did not' : 'Kafka committed it, MySQL did not'} — start the pipeline again: its reconcile redoes that side for offsets [${a.start}, ${a.end})`,
            );
          }
          break;
        case 'leave':
          done.push(`partition ${p} epoch ${epoch}: XA ${a.xid} left alone: ${a.why}`);
          break;
        case 'refuse': // never here: a refused epoch sets f.refuse, and callers stop before carryOut
          throw new Error(`partition ${p} epoch ${epoch}: not decidable: ${a.why}`);
      }
    }
  }
  return done;
}
