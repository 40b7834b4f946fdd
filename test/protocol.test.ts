/**
 * The epoch protocol's state machine (src/protocol/epoch.ts) as a table: every legal move with
 * its guard, every illegal one rejected, and the recovery decision for each kind of evidence.
 * Pure: needs no services.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  IllegalMove,
  KAFKA_MOVES,
  MYSQL_MOVES,
  afterCommit,
  complete,
  describe as describeEpoch,
  move,
  nextStep,
  openEpoch,
  prepared,
  recoverEpoch,
  type EpochEvidence,
  type EpochState,
  type Facts,
  type KafkaState,
  type MysqlState,
} from '../src/protocol/epoch';
import { attemptBqual, bqualToken } from '../src/mysql/xid';

const KAFKA: KafkaState[] = ['open', 'prepared', 'committed', 'aborted', 'redone', 'withdrawn'];
const MYSQL: MysqlState[] = ['open', 'prepared', 'committed', 'applied', 'gone', 'redone', 'rolled-back'];

/** Facts that satisfy each guard, and facts that violate it. */
const GUARD_FACTS: Record<string, { ok: Facts; bad: Facts }> = {
  'kafka:prepared→aborted': { ok: { committedEverywhere: false }, bad: { committedEverywhere: true } },
  'kafka:aborted→redone': { ok: { committedEverywhere: false }, bad: { committedEverywhere: true } },
  'mysql:prepared→committed': { ok: { decidedBranch: true }, bad: { decidedBranch: false } },
  'mysql:prepared→gone': { ok: { ledgerRow: false }, bad: { ledgerRow: true } },
  'mysql:prepared→rolled-back': { ok: { decidedBranch: false }, bad: { decidedBranch: true } },
  'mysql:gone→redone': { ok: { ledgerRow: false }, bad: { ledgerRow: true } },
};

const at = (side: 'kafka' | 'mysql', st: string, staged = true): EpochState => ({
  ...openEpoch(7, staged),
  [side]: st,
});

test('every legal move is allowed, and a guarded one only when its guard holds', () => {
  let moves = 0;
  for (const [side, table] of [
    ['kafka', KAFKA_MOVES],
    ['mysql', MYSQL_MOVES],
  ] as const) {
    for (const [from, list] of Object.entries(table)) {
      for (const m of list) {
        const key = `${side}:${from}→${m.to}`;
        const g = GUARD_FACTS[key];
        // committed → applied is guarded by the epoch's mode, not by facts (checked below).
        if (m.guard && key !== 'mysql:committed→applied') assert.ok(g, `test table lacks the guard of ${key}`);
        const s = at(side, from);
        assert.equal(move(s, side, m.to, g?.ok ?? {})[side], m.to, key);
        if (g) assert.throws(() => move(s, side, m.to, g.bad), IllegalMove, `${key} with its guard violated`);
        moves++;
      }
    }
  }
  assert.equal(moves, 11);
  // mysql committed → applied only for staged writes
  assert.equal(move(at('mysql', 'committed', true), 'mysql', 'applied').mysql, 'applied');
  assert.throws(() => move(at('mysql', 'committed', false), 'mysql', 'applied'), /guard 'staged writes'/);
});

test('every move not in the table is rejected', () => {
  let rejected = 0;
  for (const [side, states, table] of [
    ['kafka', KAFKA, KAFKA_MOVES],
    ['mysql', MYSQL, MYSQL_MOVES],
  ] as const) {
    for (const from of states) {
      for (const to of states) {
        if ((table as Record<string, readonly { to: string }[]>)[from]!.some((m) => m.to === to)) continue;
        assert.throws(
          () =>
            move(at(side, from), side, to as never, {
              committedEverywhere: false,
              ledgerRow: false,
              decidedBranch: true,
            }),
          /no such move/,
          `${side} ${from} → ${to}`,
        );
        rejected++;
      }
    }
  }
  assert.equal(rejected, 6 * 6 + 7 * 7 - 11);
});

test('the workflow loop: commit outcomes, the next step and what the status query shows', () => {
  const p = prepared(3, true);
  assert.equal(describeEpoch(openEpoch(3, true)), 'preparing');
  assert.equal(describeEpoch(p), 'prepared');
  assert.equal(nextStep(p), 'commit');
  const ok = afterCommit(p, 'committed', 'committed');
  assert.deepEqual([ok.kafka, ok.mysql, complete(ok), nextStep(ok)], ['committed', 'applied', true, 'done']);
  const direct = afterCommit(prepared(3, false), 'committed', 'committed');
  assert.deepEqual([direct.mysql, complete(direct)], ['committed', true]);
  const aborted = afterCommit(p, 'aborted', 'committed');
  assert.deepEqual([nextStep(aborted), describeEpoch(aborted)], ['redo-kafka', 'redoing']);
  assert.equal(nextStep(move(aborted, 'kafka', 'redone', { committedEverywhere: false })), 'done');
  const mysqlRedone = afterCommit(p, 'committed', 'redone');
  assert.deepEqual([mysqlRedone.mysql, complete(mysqlRedone)], ['redone', true]);
});

const ev = (over: Partial<EpochEvidence>): EpochEvidence => ({
  epoch: 5,
  marker: null,
  ledger: null,
  branches: [],
  pendingApply: false,
  token: 1000,
  ...over,
});

test('recovery: commit only the branch the committed marker names, roll back older others, leave newer ones', () => {
  const decided = 'of:p:0:5#a3.rs.00000001';
  const stale = 'of:p:0:5#a2.rk.00000002';
  const newer = 'of:p:0:5#a9.zz.00000003';
  const actions = recoverEpoch(
    ev({
      marker: { start: 10, end: 20, xid: decided },
      branches: [
        { xid: stale, token: 900 },
        { xid: decided, token: 950 },
        { xid: newer, token: 2000 },
      ],
    }),
  );
  assert.deepEqual(actions, [
    { do: 'rollback-branch', xid: stale },
    { do: 'commit-branch', xid: decided },
    { do: 'leave', xid: newer, why: 'opened by an attempt newer than this actor (a live worker may own it)' },
    { do: 'apply-staged' },
  ]);
  // The decided branch is committed even when it is newer than the actor: the marker decided it.
  assert.deepEqual(
    recoverEpoch(ev({ marker: { start: 10, end: 20, xid: decided }, branches: [{ xid: decided, token: 5000 }] }))[0],
    {
      do: 'commit-branch',
      xid: decided,
    },
  );
});

test('recovery: undecided epochs roll back, one-sided epochs are redone, disagreement is refused', () => {
  assert.deepEqual(recoverEpoch(ev({ branches: [{ xid: 'x#a1.1.00', token: 1 }] })), [
    { do: 'rollback-branch', xid: 'x#a1.1.00' },
  ]);
  assert.deepEqual(recoverEpoch(ev({ ledger: { start: 10, end: 20 } })), [{ do: 'redo-kafka', start: 10, end: 20 }]);
  assert.deepEqual(recoverEpoch(ev({ marker: { start: 10, end: 20, xid: 'gone#a1.1.00' } })), [
    { do: 'redo-mysql', start: 10, end: 20 },
  ]);
  // The decided branch vanished, a stale one is still there: roll it back, then redo.
  assert.deepEqual(
    recoverEpoch(
      ev({ marker: { start: 10, end: 20, xid: 'gone#a3.2.00' }, branches: [{ xid: 'st#a2.1.00', token: 1 }] }),
    ),
    [
      { do: 'rollback-branch', xid: 'st#a2.1.00' },
      { do: 'redo-mysql', start: 10, end: 20 },
    ],
  );
  // Markers of older versions name no xid: the only branch is the decided one; two cannot be told apart.
  assert.deepEqual(recoverEpoch(ev({ marker: { start: 10, end: 20 }, branches: [{ xid: 'a', token: 1 }] })), [
    { do: 'commit-branch', xid: 'a' },
    { do: 'apply-staged' },
  ]);
  assert.deepEqual(
    recoverEpoch(
      ev({
        marker: { start: 10, end: 20 },
        branches: [
          { xid: 'a', token: 1 },
          { xid: 'b', token: 2 },
        ],
      }),
    ).map((a) => a.do),
    ['leave', 'leave'],
  );
  assert.match(
    JSON.stringify(recoverEpoch(ev({ marker: { start: 10, end: 20 }, ledger: { start: 10, end: 21 } }))),
    /refuse/,
  );
  // Both sides committed: a leftover branch is stale; committed staged rows are applied.
  assert.deepEqual(
    recoverEpoch(
      ev({
        marker: { start: 1, end: 2 },
        ledger: { start: 1, end: 2 },
        branches: [{ xid: 'z', token: 3 }],
        pendingApply: true,
      }),
    ),
    [{ do: 'rollback-branch', xid: 'z' }, { do: 'apply-staged' }],
  );
});

test('xid fencing tokens order attempts; branches of older versions are the oldest', () => {
  const t = 1_764_572_400_123;
  assert.equal(bqualToken(attemptBqual(3, t, 'deadbeef')), t);
  assert.ok(bqualToken(attemptBqual(1, t + 1, '00')) > bqualToken(attemptBqual(9, t, '00')));
  assert.equal(bqualToken('a2.deadbeef'), 0);
  assert.ok(attemptBqual(99, Date.now(), 'ffffffff').length <= 64, 'MySQL limits a bqual to 64 bytes');
});
