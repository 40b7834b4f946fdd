/**
 * The seeded fault schedule of a campaign: which fault, when (a random moment or a named
 * protocol step), on which partition and worker, for how long. The same seed gives the same
 * schedule; `npm run chaos -- --seed N` replays it.
 */
import type { FaultPoint } from '../../src/faults';
import { prng } from '../../examples/flink-compare/scenario';

export const POINTS: readonly FaultPoint[] = [
  'prepare.start',
  'prepare.kafka-sent',
  'prepare.xa-prepared',
  'commit.before',
  'commit.between',
  'commit.mysql-committed',
  'redo.start',
];
/** Faults the campaign injects from outside the engine (plus txn-timeout, a stalled commit). */
export const INJECTED_KINDS = [
  'worker-kill',
  'worker-freeze',
  'kafka-restart',
  'kafka-restart-hard',
  'mariadb-restart',
  'mariadb-restart-hard',
  'temporal-restart',
  'temporal-restart-hard',
  'kafka-cut',
  'mysql-cut',
  // Each service frozen (SIGSTOP of its process group, SIGCONT 5–30 s later).
  'temporal-freeze',
  'kafka-freeze',
  'mariadb-freeze',
  // Two faults at once.
  'worker-kill+kafka-restart',
  'workers-kill-all',
  'mariadb+temporal-restart',
] as const;
/** Kinds added after the every-step campaign had grown to ~95 faults: in the full campaign five times each, at mixed triggers. */
export const FIVE_EACH_KINDS: readonly InjectedKind[] = [
  'temporal-freeze',
  'kafka-freeze',
  'mariadb-freeze',
  'worker-kill+kafka-restart',
  'workers-kill-all',
  'mariadb+temporal-restart',
];
/**
 * The cluster campaign's kinds (3 KRaft nodes, `npm run chaos -- --cluster`): SIGKILL of the node
 * that is the transaction coordinator of the hit epoch's transactional id, of the leader of the
 * hit partition's source or output partition, of the active controller — each node brought back
 * at once (services.sh up kafka-N), the next fault only once the cluster is whole again.
 */
export const CLUSTER_KINDS = ['kafka-txn-coordinator-kill', 'kafka-leader-kill', 'kafka-controller-kill'] as const;
export type ClusterKind = (typeof CLUSTER_KINDS)[number];
export type InjectedKind = (typeof INJECTED_KINDS)[number] | ClusterKind;
/**
 * A Kafka transaction split at its commit (the fault split=… of src/faults.ts, at commit.before):
 * COMMIT markers written to some of its partitions as a stale coordinator did, the transaction
 * aborted everywhere else; alternately the progress markers and the outputs committed.
 */
export const SPLIT_KIND = 'kafka-split' as const;
/** All fault kinds reported: the injected ones, the stalled commit, the split, and the two that live in the data/sink. */
export type FaultKind = InjectedKind | 'txn-timeout' | typeof SPLIT_KIND | 'sink-throw' | 'poison';
/** The kinds of the single-node campaigns (the short campaign checks each was injected). */
export const ALL_KINDS: readonly FaultKind[] = [...INJECTED_KINDS, 'txn-timeout', 'sink-throw', 'poison'];

export type Trigger = 'random' | FaultPoint;

export interface PlannedFault {
  n: number;
  kind: InjectedKind | 'txn-timeout' | typeof SPLIT_KIND;
  trigger: Trigger;
  /** Partition whose epoch a protocol-step trigger waits for. */
  partition: number;
  /** Worker hit by a random worker kill or network cut. */
  worker: number;
  /** Quiet time before the fault (after the previous one recovered). */
  delayMs: number;
  /** How long a network cut lasts. */
  cutMs: number;
  /** How long a service freeze lasts. */
  freezeMs: number;
}

export interface ScheduleOptions {
  seed: number;
  partitions: number;
  workers: number;
  /**
   * 'every-step': each injected kind at every protocol step plus `randomEach` random moments;
   * 'cover': each injected kind once, the protocol steps spread over the kinds so that every
   * step is used at least once (the short campaign);
   * 'soak': `soakFaults` faults at random moments, `delayMs` apart, kinds in turn (the soak);
   * 'cluster': each of CLUSTER_KINDS at every protocol step plus `randomEach` random moments.
   */
  mode: 'every-step' | 'cover' | 'soak' | 'cluster';
  randomEach: number;
  /** Stand-alone commits stalled past the transaction timeout. */
  txnTimeouts: number;
  /** Transactions split at their commit (SPLIT_KIND). */
  splits?: number;
  /** soak: number of faults and the quiet time before each. */
  soakFaults?: number;
  soakSpacingMs?: [number, number];
}

export function planFaults(o: ScheduleOptions): PlannedFault[] {
  const rnd = prng(o.seed ^ 0x5eed);
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const items: { kind: PlannedFault['kind']; trigger: Trigger }[] = [];
  if (o.mode === 'soak') {
    const n = o.soakFaults ?? 20;
    const [lo, hi] = o.soakSpacingMs ?? [150_000, 210_000];
    return Array.from({ length: n }, (_, i) => ({
      n: i + 1,
      kind: INJECTED_KINDS[i % INJECTED_KINDS.length]!,
      trigger: 'random' as const,
      partition: int(0, o.partitions - 1),
      worker: int(0, o.workers - 1),
      delayMs: int(lo, hi),
      cutMs: int(3000, 12000),
      freezeMs: int(5000, 30000),
    }));
  }
  if (o.mode === 'cluster') {
    for (const kind of CLUSTER_KINDS) {
      for (const p of POINTS) items.push({ kind, trigger: p });
      for (let i = 0; i < o.randomEach; i++) items.push({ kind, trigger: 'random' });
    }
  } else if (o.mode === 'every-step') {
    for (const kind of INJECTED_KINDS) {
      if (FIVE_EACH_KINDS.includes(kind)) {
        const triggers: Trigger[] = ['random', ...POINTS];
        shuffle(triggers, rnd);
        for (const trigger of triggers.slice(0, 5)) items.push({ kind, trigger });
        continue;
      }
      for (const p of POINTS) items.push({ kind, trigger: p });
      for (let i = 0; i < o.randomEach; i++) items.push({ kind, trigger: 'random' });
    }
  } else {
    const triggers: Trigger[] = [...POINTS];
    while (triggers.length < INJECTED_KINDS.length) triggers.push('random');
    shuffle(triggers, rnd);
    INJECTED_KINDS.forEach((kind, i) => items.push({ kind, trigger: triggers[i]! }));
  }
  for (let i = 0; i < o.txnTimeouts; i++) items.push({ kind: 'txn-timeout', trigger: 'commit.before' });
  for (let i = 0; i < (o.splits ?? 0); i++) items.push({ kind: SPLIT_KIND, trigger: 'commit.before' });
  shuffle(items, rnd);
  return items.map((it, n) => ({
    n: n + 1,
    ...it,
    partition: int(0, o.partitions - 1),
    worker: int(0, o.workers - 1),
    delayMs: int(0, 3000),
    cutMs: int(3000, 12000),
    freezeMs: int(5000, 30000),
  }));
}

function shuffle<T>(xs: T[], rnd: () => number): void {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
}
