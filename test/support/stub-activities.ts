/**
 * Stub activities for the workflow tier (test/workflows.test.ts): plain functions with the
 * signatures of src/activities, answering from scripted source partitions instead of Kafka and
 * MySQL, and logging every call in order. The workflows run unchanged against them on a real
 * Temporal dev server, so a test sees exactly which activities a loop scheduled, with which
 * epochs and offsets, in seconds.
 *
 * The scripted world: a source partition of `sourceEnd` records; an epoch takes up to
 * `perEpoch` of them from where it starts; an epoch listed in `aborted` has its Kafka commit
 * reported as aborted by the broker (the workflow must redo it), one in `mysqlRedone` its MySQL
 * side as redone (counted, nothing to do). Prepares never wait for data:
 * with nothing left they answer 'empty' (a workflow that is not draining then prepares again).
 */
import {
  advancePositions,
  type GroupPrepareResult,
  type MemberPosition,
  type PrepareResult,
  type PreparedEpoch,
  type PreparedGroupEpoch,
} from '../../src/protocol';
import type { Activities } from '../../src/activities';

/** The activities of the legacy loop of an ungrouped partition (src/workflows/legacy/partition.ts; runs without a SourceRef still take it). */
export type PartitionActivities = Pick<
  Activities,
  'reconcile' | 'prepareEpoch' | 'advanceEpoch' | 'commitEpoch' | 'abortPrepared' | 'redoKafka'
>;
/** The activities of the engine's loop (src/workflows/engine.ts). */
export type EngineActivities = Pick<
  Activities,
  'reconcileMembers' | 'prepareMembers' | 'advanceMembers' | 'commitMembers' | 'redoMembers'
>;

type Args<K extends keyof Activities> = Parameters<Activities[K]>[0];

/** The legacy partition loop's world: one source partition. */
export interface PartitionScript {
  /** Records in the source partition. */
  sourceEnd: number;
  perEpoch: number;
  /** Epochs whose Kafka transaction the broker aborted (their commit answers 'aborted'). */
  aborted?: number[];
  /** Epochs whose XA branch was gone at commit (their commit answers MySQL 'redone'). */
  mysqlRedone?: number[];
  /** reconcile's answer; default: the caller's `expected`, or epoch 0 at offset 0 on a fresh start. */
  reconcile?: (args: Args<'reconcile'>) => { epoch: number; offset: number };
  /** Runs inside advanceEpoch before it answers (e.g. to signal the workflow while the epoch is in flight). */
  duringAdvance?: (args: Args<'advanceEpoch'>) => Promise<void>;
}

/**
 * The legacy partition loop's calls, one line each, in the order the activities ran:
 *   reconcile expected=E@O | fresh      reconcile
 *   prepare E@O                         prepareEpoch of epoch E from offset O
 *   advance E → N@O | empty | withdrawn advanceEpoch: commit E; the next prepare's answer
 *   commit E                            commitEpoch
 *   withdraw E                          abortPrepared
 *   redo E                              redoKafka
 */
export function partitionStubs(script: PartitionScript) {
  const calls: string[] = [];
  const args: { name: keyof PartitionActivities; args: unknown }[] = [];
  const aborted = new Set(script.aborted ?? []);
  const mysqlOutcome = (p: PreparedEpoch) =>
    (script.mysqlRedone ?? []).includes(p.epoch) ? ('redone' as const) : ('committed' as const);
  const log = (name: keyof PartitionActivities, a: unknown, line: string) => {
    calls.push(line);
    args.push({ name, args: a });
  };

  const prepared = (epoch: number, offset: number): PrepareResult => {
    const end = Math.min(offset + script.perEpoch, script.sourceEnd);
    if (end <= offset) return { kind: 'empty', offset };
    const kafka = { transactionalId: `stub.${epoch % 2}`, producerId: 100, producerEpoch: epoch, markerOffset: epoch };
    return {
      kind: 'prepared',
      epoch,
      start: offset,
      end,
      records: end - offset,
      deadLetters: 0,
      kafka,
      xid: `xid-${epoch}`,
    };
  };
  const kafkaOutcome = (p: PreparedEpoch) => (aborted.has(p.epoch) ? ('aborted' as const) : ('committed' as const));
  const describeNext = (n: PrepareResult | undefined) =>
    !n ? 'withdrawn' : n.kind === 'empty' ? 'empty' : `${n.epoch}@${n.start}`;

  const activities: PartitionActivities = {
    async reconcile(a) {
      log('reconcile', a, `reconcile ${a.expected ? `expected=${a.expected.epoch}@${a.expected.offset}` : 'fresh'}`);
      const at = script.reconcile?.(a) ?? a.expected ?? { epoch: 0, offset: 0 };
      return { ...at, rolledBack: [] };
    },
    async prepareEpoch(a) {
      log('prepareEpoch', a, `prepare ${a.epoch}@${a.offset}`);
      return prepared(a.epoch, a.offset);
    },
    async advanceEpoch(a) {
      await script.duringAdvance?.(a);
      const kafka = kafkaOutcome(a.prepared);
      // As src/activities/advance.ts: the next epoch is withdrawn inside when this one must be redone.
      const next = kafka === 'aborted' ? undefined : prepared(a.prepared.epoch + 1, a.prepared.end);
      log('advanceEpoch', a, `advance ${a.prepared.epoch} → ${describeNext(next)}`);
      return { kafka, mysql: mysqlOutcome(a.prepared), ...(next ? { next } : {}) };
    },
    async commitEpoch(a) {
      log('commitEpoch', a, `commit ${a.prepared.epoch}`);
      return { kafka: kafkaOutcome(a.prepared), mysql: mysqlOutcome(a.prepared) };
    },
    async abortPrepared(a) {
      log('abortPrepared', a, `withdraw ${a.prepared.epoch}`);
    },
    async redoKafka(a) {
      log('redoKafka', a, `redo ${a.prepared.epoch}`);
      return { redone: true };
    },
  };
  return { activities, calls, args };
}

export interface EngineScript {
  /** Records in each member's source partition, by member id. */
  sourceEnd: Record<number, number>;
  perEpoch: number;
  /** Epochs (the unit's) whose Kafka transaction the broker aborted. */
  aborted?: number[];
  /** Epochs whose XA branch was gone at commit (their commit answers MySQL 'redone'). */
  mysqlRedone?: number[];
  /** reconcileMembers' answer; default: the caller's `expected`, or every member at epoch 0, offset 0. */
  reconcile?: (args: Args<'reconcileMembers'>) => MemberPosition[];
  /** Runs inside advanceMembers before it answers (e.g. to signal the workflow while the epoch is in flight). */
  duringAdvance?: (args: Args<'advanceMembers'>) => Promise<void>;
}

/** Positions as 'id:epoch@offset', space-separated (how the call log shows them). */
const showPositions = (ps: MemberPosition[]) => ps.map((p) => `${p.id}:${p.epoch}@${p.offset}`).join(' ');

/**
 * The calls of the engine's loop (src/workflows/engine.ts), for a group of one and a partition
 * group alike, one line each, in order:
 *   reconcile expected=<positions> | fresh | joining <ids>
 *   prepare E <positions>           prepare the unit's epoch E from these member positions
 *   advance E → <next>              commit E; the next epoch's prepare: its members' positions, 'empty' or 'withdrawn'
 *   commit E | redo E
 */
export function engineStubs(script: EngineScript) {
  const calls: string[] = [];
  const args: { name: keyof EngineActivities; args: unknown }[] = [];
  const aborted = new Set(script.aborted ?? []);
  const log = (name: keyof EngineActivities, a: unknown, line: string) => {
    calls.push(line);
    args.push({ name, args: a });
  };

  const prepared = (groupEpoch: number, positions: MemberPosition[]): GroupPrepareResult => {
    const members = positions
      .map((p) => ({ p, end: Math.min(p.offset + script.perEpoch, script.sourceEnd[p.id] ?? 0) }))
      .filter(({ p, end }) => end > p.offset)
      .map(({ p, end }) => ({
        id: p.id,
        epoch: p.epoch,
        start: p.offset,
        end,
        records: end - p.offset,
        deadLetters: 0,
        markerOffset: p.epoch,
      }));
    if (!members.length) return { kind: 'empty' };
    return {
      kind: 'prepared',
      groupEpoch,
      members,
      kafka: { transactionalId: `stub.${groupEpoch % 2}`, producerId: 200, producerEpoch: groupEpoch },
      xid: `xid-${groupEpoch}`,
    };
  };
  const kafkaOutcome = (p: PreparedGroupEpoch) =>
    aborted.has(p.groupEpoch) ? ('aborted' as const) : ('committed' as const);
  const mysqlOutcome = (p: PreparedGroupEpoch) =>
    (script.mysqlRedone ?? []).includes(p.groupEpoch) ? ('redone' as const) : ('committed' as const);
  const describeNext = (n: GroupPrepareResult | undefined) =>
    !n
      ? 'withdrawn'
      : n.kind === 'empty'
        ? 'empty'
        : showPositions(n.members.map((m) => ({ id: m.id, epoch: m.epoch, offset: m.start })));

  const activities: EngineActivities = {
    async reconcileMembers(a) {
      log(
        'reconcileMembers',
        a,
        `reconcile ${a.joining ? `joining ${a.members.map((m) => m.id).join(' ')}` : a.expected ? `expected=${showPositions(a.expected)}` : 'fresh'}`,
      );
      const positions =
        (!a.joining && script.reconcile?.(a)) ||
        a.expected ||
        a.members.map((m) => ({ id: m.id, epoch: 0, offset: 0 }));
      return { positions };
    },
    async prepareMembers(a) {
      log('prepareMembers', a, `prepare ${a.groupEpoch} ${showPositions(a.positions)}`);
      return prepared(a.groupEpoch, a.positions);
    },
    async advanceMembers(a) {
      await script.duringAdvance?.(a);
      const kafka = kafkaOutcome(a.prepared);
      // As src/activities/advance.ts: the next epoch starts where this one's members end, and is withdrawn inside when this one must be redone.
      const next =
        kafka === 'aborted'
          ? undefined
          : prepared(a.prepared.groupEpoch + 1, advancePositions(a.positions, a.prepared));
      log('advanceMembers', a, `advance ${a.prepared.groupEpoch} → ${describeNext(next)}`);
      return { kafka, mysql: mysqlOutcome(a.prepared), ...(next ? { next } : {}) };
    },
    async commitMembers(a) {
      log('commitMembers', a, `commit ${a.prepared.groupEpoch}`);
      return { kafka: kafkaOutcome(a.prepared), mysql: mysqlOutcome(a.prepared) };
    },
    async redoMembers(a) {
      log('redoMembers', a, `redo ${a.prepared.groupEpoch}`);
      return { redone: true };
    },
  };
  return { activities, calls, args };
}
