/**
 * The epoch protocol as data: the states each participant of one epoch goes through, the legal
 * moves with their guards, and the recovery decision that the workflow loop, reconcile and
 * `onceflow transactions` all take from what they observed.
 *
 *   Kafka side                                  MySQL side (XA branch)
 *   open ──produce+marker──► prepared           open ──XA PREPARE──► prepared
 *   prepared ──EndTxn(commit)──► committed      prepared ──XA COMMIT──► committed
 *   prepared ──broker timeout/fenced/split──► aborted   committed ──apply staged rows──► applied [staged]
 *   aborted ──redo (the parts without a committed copy)──► redone   prepared ──rolled back behind us──► gone
 *   prepared ──withdraw (e−1 is redone)──► withdrawn  gone ──redo (no ledger row)──► redone
 *                                                prepared ──roll back (not decided)──► rolled-back
 *
 * The decision: the prepare result in workflow history names the epoch's Kafka handle and its
 * xid. The same xid is written into the epoch's progress marker inside the Kafka transaction, so
 * a committed marker names the decided branch too; recovery without history uses that. The
 * commit moves are taken as soon as the decision is in history, by the worker that prepared the
 * epoch (src/activities/decided.ts), and again, idempotently, by the activity that commits it in
 * the workflow's order when that one does not find the first's outcome.
 *
 * Pure module: no I/O, imported by workflow code and activities alike.
 */

export type KafkaState = 'open' | 'prepared' | 'committed' | 'aborted' | 'redone' | 'withdrawn';
export type MysqlState = 'open' | 'prepared' | 'committed' | 'applied' | 'gone' | 'redone' | 'rolled-back';

export interface EpochState {
  epoch: number;
  kafka: KafkaState;
  mysql: MysqlState;
  /** Staged MySQL writes: the epoch is done on the MySQL side only once its rows are applied. */
  staged: boolean;
}

/** What an actor knows when it moves a participant (the guards read it). */
export interface Facts {
  /**
   * The epoch's Kafka transaction committed on every partition it wrote (its markers, outputs and
   * dead letters, read from the transaction markers that follow its records: src/kafka/outcome.ts).
   * False when it aborted anywhere — wholly, or split by Kafka — so that part must be redone.
   */
  committedEverywhere?: boolean;
  /** The epoch's ledger row is committed. */
  ledgerRow?: boolean;
  /** The branch being moved is the one history (or the committed marker) decided. */
  decidedBranch?: boolean;
}

interface Move<S extends string> {
  to: S;
  /** What must hold; undefined = always legal from this state. */
  guard?: { what: string; holds: (f: Facts, s: EpochState) => boolean };
}

export const KAFKA_MOVES: Record<KafkaState, readonly Move<KafkaState>[]> = {
  open: [{ to: 'prepared' }],
  prepared: [
    { to: 'committed' },
    {
      to: 'aborted',
      guard: { what: 'the transaction aborted on a partition it wrote', holds: (f) => f.committedEverywhere === false },
    },
    { to: 'withdrawn' },
  ],
  aborted: [
    {
      to: 'redone',
      guard: {
        what: 'a partition the transaction wrote has no committed copy',
        holds: (f) => f.committedEverywhere === false,
      },
    },
  ],
  committed: [],
  redone: [],
  withdrawn: [],
};

export const MYSQL_MOVES: Record<MysqlState, readonly Move<MysqlState>[]> = {
  open: [{ to: 'prepared' }],
  prepared: [
    { to: 'committed', guard: { what: 'the branch is the decided one', holds: (f) => f.decidedBranch === true } },
    { to: 'gone', guard: { what: 'no ledger row of the epoch', holds: (f) => f.ledgerRow === false } },
    {
      to: 'rolled-back',
      guard: { what: 'the branch is not the decided one', holds: (f) => f.decidedBranch === false },
    },
  ],
  committed: [{ to: 'applied', guard: { what: 'staged writes', holds: (_f, s) => s.staged } }],
  gone: [{ to: 'redone', guard: { what: 'no ledger row of the epoch', holds: (f) => f.ledgerRow === false } }],
  applied: [],
  redone: [],
  'rolled-back': [],
};

export class IllegalMove extends Error {
  constructor(s: EpochState, side: 'kafka' | 'mysql', to: string, why: string) {
    super(`epoch ${s.epoch}: ${side} ${s[side]} → ${to} is not allowed: ${why}`);
    this.name = 'IllegalMove';
  }
}

export const openEpoch = (epoch: number, staged: boolean): EpochState => ({
  epoch,
  kafka: 'open',
  mysql: 'open',
  staged,
});

/** Moves one participant, or throws IllegalMove naming the missing move or the guard that failed. */
export function move(
  s: EpochState,
  side: 'kafka' | 'mysql',
  to: KafkaState | MysqlState,
  facts: Facts = {},
): EpochState {
  const moves = (side === 'kafka' ? KAFKA_MOVES[s.kafka] : MYSQL_MOVES[s.mysql]) as readonly Move<string>[];
  const m = moves.find((x) => x.to === to);
  if (!m)
    throw new IllegalMove(
      s,
      side,
      to,
      `no such move (from ${s[side]}: ${moves.map((x) => x.to).join(', ') || 'none, final'})`,
    );
  if (m.guard && !m.guard.holds(facts, s)) throw new IllegalMove(s, side, to, `guard '${m.guard.what}' does not hold`);
  return { ...s, [side]: to };
}

/** Both participants prepared: the prepare result (the decision) is in history. */
export const prepared = (epoch: number, staged: boolean): EpochState => ({
  epoch,
  kafka: 'prepared',
  mysql: 'prepared',
  staged,
});

/** After a commit (commitMembers or advanceMembers; commitEpoch in the legacy loop): the state its outcomes put the epoch in. */
export function afterCommit(s: EpochState, kafka: 'committed' | 'aborted', mysql: 'committed' | 'redone'): EpochState {
  let n =
    kafka === 'committed' ? move(s, 'kafka', 'committed') : move(s, 'kafka', 'aborted', { committedEverywhere: false });
  n =
    mysql === 'committed'
      ? move(n, 'mysql', 'committed', { decidedBranch: true })
      : move(move(n, 'mysql', 'gone', { ledgerRow: false }), 'mysql', 'redone', { ledgerRow: false });
  return n.staged && n.mysql === 'committed' ? move(n, 'mysql', 'applied') : n;
}

const KAFKA_DONE: readonly KafkaState[] = ['committed', 'redone'];
const MYSQL_DONE = (s: EpochState): boolean =>
  s.mysql === 'applied' || s.mysql === 'redone' || (!s.staged && s.mysql === 'committed');

/** Both sides visible: the epoch is complete and the partition may move on. */
export const complete = (s: EpochState): boolean => KAFKA_DONE.includes(s.kafka) && MYSQL_DONE(s);

/** The next step of the workflow loop for an epoch in flight. */
export function nextStep(s: EpochState): 'commit' | 'redo-kafka' | 'done' {
  if (complete(s)) return 'done';
  if (s.kafka === 'aborted') return 'redo-kafka';
  if (s.kafka === 'prepared' && s.mysql === 'prepared') return 'commit';
  throw new Error(`epoch ${s.epoch}: no step from kafka ${s.kafka} / mysql ${s.mysql}`);
}

/** What the status query shows for an epoch in flight. */
export function describe(s: EpochState): string {
  if (s.kafka === 'open' || s.mysql === 'open') return 'preparing';
  if (s.kafka === 'prepared' && s.mysql === 'prepared') return 'prepared';
  if (s.kafka === 'aborted') return 'redoing';
  return complete(s) ? 'committed' : 'committing';
}

// ---- Recovery: one epoch's evidence → what to do --------------------------------------------

export interface BranchSeen {
  xid: string;
  /** Fencing token of the attempt that opened it (src/mysql/xid.ts). */
  token: number;
}

export interface EpochEvidence {
  epoch: number;
  /** The committed progress marker of the epoch (Kafka side committed), with the xid it decided (absent on markers of older versions). */
  marker: { start: number; end: number; xid?: string } | null;
  /** The epoch's ledger row (MySQL side committed). */
  ledger: { start: number; end: number } | null;
  /** Prepared XA branches of the epoch. */
  branches: BranchSeen[];
  /** Staged rows committed but not yet applied. */
  pendingApply: boolean;
  /**
   * The deciding actor's own fencing token: branches opened by attempts scheduled after it
   * (a live worker's) are left alone. Infinity for an actor that knows nothing runs.
   */
  token: number;
}

export type RecoveryAction =
  | { do: 'commit-branch'; xid: string }
  | { do: 'rollback-branch'; xid: string }
  | { do: 'apply-staged' }
  | { do: 'redo-kafka'; start: number; end: number }
  | { do: 'redo-mysql'; start: number; end: number }
  | { do: 'leave'; xid: string; why: string }
  | { do: 'refuse'; why: string };

/**
 * The one recovery decision, used by reconcile (before a partition runs) and by
 * `onceflow transactions --resolve` (while it is stopped):
 *  - a branch is committed only if it is the one the committed marker names (or, for markers of
 *    older versions without an xid, the only prepared branch of the epoch);
 *  - every other branch older than the actor is rolled back; a newer one is left alone;
 *  - MySQL committed without Kafka → redo the Kafka side from the ledger row's offsets;
 *    Kafka committed without MySQL and no decided branch left → redo the MySQL side from the marker's;
 *  - ledger and marker naming different offsets is never guessed at.
 */
export function recoverEpoch(ev: EpochEvidence): RecoveryAction[] {
  const { marker, ledger } = ev;
  if (marker && ledger && (marker.start !== ledger.start || marker.end !== ledger.end)) {
    return [
      {
        do: 'refuse',
        why: `epoch ${ev.epoch}: the progress marker says offsets [${marker.start}, ${marker.end}), the ledger [${ledger.start}, ${ledger.end})`,
      },
    ];
  }
  const out: RecoveryAction[] = [];
  const decided = marker ? (marker.xid ?? (ev.branches.length === 1 ? ev.branches[0]!.xid : undefined)) : undefined;
  let committing = false;
  for (const b of ev.branches) {
    if (marker && !ledger && b.xid === decided) {
      out.push({ do: 'commit-branch', xid: b.xid });
      committing = true;
    } else if (b.token >= ev.token) {
      out.push({
        do: 'leave',
        xid: b.xid,
        why: 'opened by an attempt newer than this actor (a live worker may own it)',
      });
    } else if (marker && !ledger && decided === undefined) {
      out.push({ do: 'leave', xid: b.xid, why: 'several branches and a marker that names none: decide by hand' });
    } else {
      out.push({ do: 'rollback-branch', xid: b.xid });
    }
  }
  if (marker && !ledger && !committing && !out.some((a) => a.do === 'leave'))
    out.push({ do: 'redo-mysql', start: marker.start, end: marker.end });
  if (ledger && !marker) out.push({ do: 'redo-kafka', start: ledger.start, end: ledger.end });
  if (ev.pendingApply || committing) out.push({ do: 'apply-staged' });
  return out;
}
