/**
 * The one epoch engine: a loop that drives the epochs of a unit — a set of source partitions
 * (members) whose every epoch is ONE Kafka transaction and ONE XA branch (src/protocol/group.ts).
 * A partition group (spec.parallelism) is a unit of several members; an ungrouped partition is a
 * group of one (`solo`). Both are settings of this code (src/workflows/partition.ts and group.ts
 * only wrap it); each epoch in flight is an EpochState moved by src/protocol/epoch.ts.
 *
 *   1 reconcileMembers           settle what a crash left, agree on each member's position
 *   2 prepareMembers(e)          → { members' ranges, Kafka handle, xid }   (in history: the decision)
 *   3 advanceMembers(e)          commit e ∥ prepare e+1, in one activity   (commitMembers alone for a run's last,
 *                                when pausing, stopping or taking in joining partitions, after a failed advance);
 *                                the worker that prepared e has usually committed it already, once its result was
 *                                in history (src/activities/decided.ts), and the commit takes that outcome
 *   4 redoMembers(e)             if the broker aborted e's Kafka side; e+1 is prepared after it
 *   5 continue-as-new when history grows
 *
 * Only offsets, ids and transaction handles enter history (and the spec, in each activity's input).
 */
import {
  CancellationScope,
  allHandlersFinished,
  condition,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import {
  advancePositions,
  afterEpoch,
  applyControl,
  assertTransition,
  describeMembers,
  redoReason,
  validateControl,
  type Control,
  type GroupCommitResult,
  type GroupMember,
  type GroupPrepareResult,
  type KafkaSplit,
  type MemberPosition,
  type PartitionState,
  type PartitionStatus,
  type Phase,
  type PreparedGroupEpoch,
} from '../protocol';
import {
  afterCommit,
  describe,
  move,
  nextStep,
  openEpoch,
  prepared as preparedState,
  type EpochState,
} from '../protocol/epoch';
import { SEARCH_ATTRIBUTES } from '../search-attributes';
import type { PipelineSpec } from '../spec';
import { epochActivityOptions } from './activity-options';
import { epochAttribute } from './epoch-attribute';
import {
  addMembersSignal,
  controlSignal,
  controlUpdate,
  groupStatusQuery,
  type GroupStatus,
  type PartitionResult,
} from './interface';

export type MemberState = PartitionState & { id: number };

export const zeroState = (p: MemberPosition): MemberState => ({
  id: p.id,
  epoch: p.epoch,
  offset: p.offset,
  committedEpochs: 0,
  records: 0,
  deadLetters: 0,
  redos: 0,
  mysqlRedos: 0,
});
/** A member's state as an ungrouped partition's (status query, results). */
export const partitionState = ({ id: _id, ...s }: MemberState): PartitionState => s;

export interface EngineInput {
  spec: PipelineSpec;
  /** The group id; for a group of one, the source partition id. */
  group: number;
  /** A group of one: an ungrouped source partition (its own ids, its status shaped as a partition's). */
  solo: boolean;
  members: GroupMember[];
  /** Carried across continue-as-new: each member's state (and a group's epoch counter). */
  carried?: { groupEpoch?: number; members: MemberState[] };
  control?: Control;
}

/** What the engine hands its wrapper when a run ends by continue-as-new. */
export interface Carry {
  groupEpoch: number;
  members: MemberState[];
  /** Members as of now, with partitions that asked to join but are not reconciled yet. */
  all: GroupMember[];
  control: Control;
}

export interface EngineHooks {
  /** Continues as new with the wrapper's own input shape. */
  continueAsNew(carry: Carry): Promise<never>;
  /** Members changed (partitions joined a group). */
  membersNow?(ids: number[]): void;
}

export async function runEngine(input: EngineInput, hooks: EngineHooks): Promise<PartitionResult[]> {
  const { spec, group, solo } = input;
  const unit = { spec, group, ...(solo ? { solo } : {}) };
  const opts = epochActivityOptions(spec);
  const acts = proxyActivities<Activities>(opts.commit);
  const staged = (spec.mysqlSink.mode ?? 'direct') === 'staged';

  let members: GroupMember[] = [...input.members];
  let joins: GroupMember[] = [];
  let control: Control = input.control ?? { paused: false, drain: false, stop: false };
  let phase: Phase = 'reconciling';
  let lastError: string | undefined;
  let runEpochs = 0;
  let lastCommitAt: number | undefined;
  let groupEpoch = input.carried?.groupEpoch ?? 0;
  const carried = new Map((input.carried?.members ?? []).map((m) => [m.id, m]));
  let state: MemberState[] = members.map((m) => carried.get(m.id) ?? zeroState({ id: m.id, epoch: 0, offset: 0 }));
  /** Epochs in flight (at most two: e committing while e+1 prepares): their members and where each participant stands. */
  const inFlight = new Map<number, { members: string; epoch: EpochState }>();

  const label = (e: number, covering: string) =>
    solo ? `epoch ${e}` : `group ${group} epoch ${e} (partitions ${covering})`;
  const shownEpoch = epochAttribute();
  const running = (p: Phase) => p === 'preparing' || p === 'committing';
  const setPhase = (to: Phase) => {
    if (to === phase) return;
    assertTransition(phase, to);
    const quiet = running(phase) && running(to);
    phase = to;
    if (quiet) return;
    shownEpoch.flush();
    upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.phase, value: to }]);
  };
  const positions = (): MemberPosition[] => state.map(({ id, epoch, offset }) => ({ id, epoch, offset }));
  const track = (e: number, covering: string, epoch: EpochState) => inFlight.set(e, { members: covering, epoch });

  setHandler(groupStatusQuery, (partition?: number): GroupStatus | PartitionStatus => {
    const flight = [...inFlight.entries()].map(([e, f]) => ({ e, ...f }));
    const common = { control, lastError, runEpochs, ...(lastCommitAt !== undefined ? { lastCommitAt } : {}) };
    if (solo || partition !== undefined) {
      const id = solo ? group : partition!;
      const own = state.find((s) => s.id === id);
      return {
        pipeline: spec.name,
        partition: id,
        phase: own ? phase : 'reconciling',
        state: partitionState(own ?? zeroState({ id, epoch: 0, offset: 0 })),
        ...common,
        inFlight: flight.map((f) => ({
          epoch: f.e,
          kafka: f.epoch.kafka,
          mysql: f.epoch.mysql,
          step: solo ? describe(f.epoch) : `group ${group} epoch ${f.e} (${f.members}): ${describe(f.epoch)}`,
        })),
      };
    }
    return {
      pipeline: spec.name,
      group,
      phase,
      groupEpoch,
      members: state,
      ...common,
      inFlight: flight.map((f) => ({ groupEpoch: f.e, members: f.members, step: describe(f.epoch) })),
    };
  });
  setHandler(controlUpdate, (action) => (control = applyControl(control, action)), {
    validator: (action) => validateControl(action, control),
  });
  setHandler(controlSignal, (action) => {
    try {
      validateControl(action, control);
      control = applyControl(control, action);
    } catch {
      // Signals cannot answer; a control that does not apply any more is ignored.
    }
  });
  if (!solo) {
    setHandler(addMembersSignal, (added) => {
      for (const m of added)
        if (!members.some((x) => x.id === m.id) && !joins.some((x) => x.id === m.id)) joins.push(m);
    });
  }

  const reconciled = await acts.reconcileMembers.executeWithOptions(
    {
      ...opts.admin,
      summary: solo
        ? `reconcile partition ${group}`
        : `reconcile group ${group}: partitions ${members.map((m) => m.id).join(' ')}`,
    },
    [
      {
        ...unit,
        members,
        ...(input.carried
          ? { expected: input.carried.members.map(({ id, epoch, offset }) => ({ id, epoch, offset })) }
          : {}),
      },
    ],
  );
  state = reconciled.positions.map((p) => ({
    ...(carried.get(p.id) ?? zeroState(p)),
    epoch: p.epoch,
    offset: p.offset,
  }));
  if (solo) {
    // A group of one's epoch is its partition's: its transactional ids and gtrid are numbered by it.
    groupEpoch = state[0]!.epoch;
    upsertSearchAttributes([
      { key: SEARCH_ATTRIBUTES.pipeline, value: spec.name },
      { key: SEARCH_ATTRIBUTES.partition, value: group },
      { key: SEARCH_ATTRIBUTES.epoch, value: groupEpoch },
    ]);
    shownEpoch.start(groupEpoch, true);
  } else {
    if (!input.carried) upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }]);
    shownEpoch.start(groupEpoch);
  }

  /** The state the prepare result puts an epoch in: prepared (its decision is in history), or none (empty). */
  const settle = (e: number, r: GroupPrepareResult | undefined) => {
    if (r?.kind === 'prepared') track(e, describeMembers(r.members), preparedState(e, staged));
    else inFlight.delete(e);
  };
  const prepare = (): Promise<GroupPrepareResult> => {
    const covering = describeMembers(state);
    track(groupEpoch, covering, openEpoch(groupEpoch, staged));
    return acts.prepareMembers
      .executeWithOptions(
        {
          ...opts.prepare,
          summary: `${label(groupEpoch, covering)}: prepare${solo ? ` from offset ${state[0]!.offset}` : ''}`,
        },
        [{ ...unit, members, groupEpoch, positions: positions(), noWait: control.drain }],
      )
      .then((r) => {
        settle(groupEpoch, r);
        return r;
      });
  };
  /** Moves epoch p by its commit's outcomes (src/protocol/epoch.ts); an outcome the table does not allow fails the workflow task loudly. */
  const committed = (p: PreparedGroupEpoch, c: GroupCommitResult): EpochState => {
    const after = afterCommit(
      inFlight.get(p.groupEpoch)?.epoch ?? preparedState(p.groupEpoch, staged),
      c.kafka,
      c.mysql,
    );
    track(p.groupEpoch, describeMembers(p.members), after);
    return after;
  };
  const redo = async (p: PreparedGroupEpoch, split: KafkaSplit | undefined) => {
    setPhase('redoing');
    const covering = describeMembers(p.members);
    lastError = redoReason(solo ? `epoch ${p.groupEpoch}` : `group ${group} epoch ${p.groupEpoch}`, split);
    await CancellationScope.nonCancellable(() =>
      acts.redoMembers.executeWithOptions(
        { ...opts.commit, summary: `${label(p.groupEpoch, covering)}: redo Kafka side` },
        [{ ...unit, members, prepared: p }],
      ),
    );
    const f = inFlight.get(p.groupEpoch);
    if (f) track(p.groupEpoch, f.members, move(f.epoch, 'kafka', 'redone', { committedEverywhere: false }));
  };
  /** Commits p (and, overlapping, prepares the next epoch). If that fails for good, p — decided — is still committed before the failure ends the unit. */
  const commit = async (
    p: PreparedGroupEpoch,
    overlapNext: boolean,
  ): Promise<GroupCommitResult & { next?: GroupPrepareResult }> => {
    setPhase('committing');
    const covering = describeMembers(p.members);
    const commitOnly = () =>
      CancellationScope.nonCancellable(() =>
        acts.commitMembers.executeWithOptions(
          { ...opts.commit, summary: `${label(p.groupEpoch, covering)}: commit (EndTxn ∥ XA COMMIT)` },
          [{ ...unit, members, prepared: p }],
        ),
      );
    if (!overlapNext) return commitOnly();
    const after = advancePositions(positions(), p);
    track(p.groupEpoch + 1, describeMembers(after), openEpoch(p.groupEpoch + 1, staged));
    try {
      const a = await CancellationScope.nonCancellable(() =>
        acts.advanceMembers.executeWithOptions(
          {
            ...opts.advance,
            summary: `${label(p.groupEpoch, covering)}: commit, and prepare epoch ${p.groupEpoch + 1}`,
          },
          [{ ...unit, members, prepared: p, positions: positions(), noWait: control.drain }],
        ),
      );
      settle(p.groupEpoch + 1, a.next);
      return a;
    } catch (e) {
      inFlight.delete(p.groupEpoch + 1);
      const c = await commitOnly();
      if (nextStep(committed(p, c)) === 'redo-kafka') await redo(p, c.split);
      throw e;
    }
  };
  const results = (reason: PartitionResult['reason']): PartitionResult[] =>
    state.map((m) => ({ pipeline: spec.name, partition: m.id, state: partitionState(m), reason }));

  // The next epoch's prepare result, which came with the commit of the one before.
  let next: GroupPrepareResult | undefined;
  for (;;) {
    if (!next) {
      if (joins.length) {
        // Nothing is in flight: reconcile the partitions that joined and take them in.
        const joining = joins;
        joins = [];
        setPhase('preparing');
        const r = await acts.reconcileMembers.executeWithOptions(
          {
            ...opts.admin,
            summary: `reconcile partitions ${joining.map((m) => m.id).join(' ')} joining group ${group}`,
          },
          [{ ...unit, members: joining, joining: true }],
        );
        members = [...members, ...joining];
        state = [...state, ...r.positions.map(zeroState)];
        hooks.membersNow?.(members.map((m) => m.id));
      }
      if (control.paused && !control.stop) {
        setPhase('paused');
        await condition(() => !control.paused || control.stop);
      }
      if (control.stop) {
        setPhase('stopped');
        await condition(allHandlersFinished);
        if (joins.length) continue;
        return results('stopped');
      }
    }
    setPhase('preparing');
    const r = next ?? (await prepare());
    next = undefined;
    if (r.kind === 'empty') {
      if (control.drain) {
        await condition(allHandlersFinished);
        if (joins.length) continue;
        setPhase('done');
        return results('drained');
      }
    } else {
      const lastOfRun = runEpochs + 1 >= spec.epochsPerRun || workflowInfo().continueAsNewSuggested;
      const c = await commit(r, !lastOfRun && !control.paused && !control.stop && joins.length === 0);
      next = c.next;
      const redone = nextStep(committed(r, c)) === 'redo-kafka';
      if (redone) await redo(r, c.split);
      inFlight.delete(r.groupEpoch);
      lastCommitAt = Date.now();
      state = state.map((s) => {
        const m = r.members.find((x) => x.id === s.id);
        if (!m) return s;
        return {
          ...afterEpoch(s, m),
          id: s.id,
          redos: s.redos + (redone ? 1 : 0),
          mysqlRedos: s.mysqlRedos + (c.mysql === 'redone' ? 1 : 0),
        };
      });
      groupEpoch = r.groupEpoch + 1;
      shownEpoch.committed(groupEpoch);
    }
    runEpochs++;
    if (!next && (runEpochs >= spec.epochsPerRun || workflowInfo().continueAsNewSuggested)) {
      await condition(allHandlersFinished);
      return hooks.continueAsNew({ groupEpoch, members: state, all: [...members, ...joins], control });
    }
  }
}
