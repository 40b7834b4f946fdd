/**
 * LEGACY — the loop of a partition group before the one engine (src/workflows/engine.ts), kept
 * unchanged so that histories recorded before ONE_ENGINE_PATCH replay, and so that runs still
 * inside such a history go on until their next continue-as-new (which starts the engine).
 * Do not change what it schedules; its activities are the group names of src/activities/legacy.ts.
 */
import {
  CancellationScope,
  allHandlersFinished,
  condition,
  continueAsNew,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../../activities';
import {
  advancePositions,
  afterEpoch,
  applyControl,
  assertTransition,
  describeMembers,
  redoReason,
  validateControl,
  type Control,
  type KafkaSplit,
  type GroupCommitResult,
  type GroupInput,
  type GroupMember,
  type GroupPrepareResult,
  type GroupState,
  type MemberPosition,
  type PartitionState,
  type Phase,
  type PreparedGroupEpoch,
} from '../../protocol';
import { SEARCH_ATTRIBUTES } from '../../search-attributes';
import { epochActivityOptions } from '../activity-options';
import { epochAttribute } from '../epoch-attribute';
import { addMembersSignal, controlSignal, controlUpdate, groupStatusQuery, type PartitionResult } from '../interface';
import type { groupWorkflow } from '../group';

type MemberState = PartitionState & { id: number };
const zero = (p: MemberPosition): MemberState => ({
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
const partitionState = ({ id: _id, ...s }: MemberState): PartitionState => s;

/**
 * A group that ends tells its pipeline workflow every member's end in one signal
 * (partitionsEndedSignal) instead of one signal per member: at 32 members that was 64 history
 * events and about ten workflow tasks in the group, and 32 signals and their workflow tasks in
 * the pipeline, at the end of every run. Runs recorded before this patch replay the per-member signals.
 */
export const GROUP_ENDS_PATCH = 'group-ends-v1';

export async function runGroup(input: GroupInput, membersNow: (ids: number[]) => void): Promise<PartitionResult[]> {
  const { spec, group } = input;
  const opts = epochActivityOptions(spec);
  const acts = proxyActivities<Activities>(opts.commit);

  let members: GroupMember[] = [...input.members];
  let joins: GroupMember[] = [];
  let control: Control = input.control ?? { paused: false, drain: false, stop: false };
  let phase: Phase = 'reconciling';
  let lastError: string | undefined;
  let runEpochs = 0;
  let lastCommitAt: number | undefined;
  let groupEpoch = input.state?.groupEpoch ?? 0;
  let state: MemberState[] = [];
  const inFlight = new Map<number, { members: string; step: string }>();

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

  setHandler(groupStatusQuery, (partition?: number) => {
    const flight = [...inFlight.entries()].map(([e, f]) => ({ groupEpoch: e, ...f }));
    if (partition === undefined) {
      return {
        pipeline: spec.name,
        group,
        phase,
        groupEpoch,
        members: state,
        control,
        lastError,
        runEpochs,
        inFlight: flight,
        ...(lastCommitAt !== undefined ? { lastCommitAt } : {}),
      };
    }
    const own = partitionState(state.find((s) => s.id === partition) ?? zero({ id: partition, epoch: 0, offset: 0 }));
    return {
      pipeline: spec.name,
      partition,
      phase: state.some((s) => s.id === partition) ? phase : 'reconciling',
      state: own,
      control,
      lastError,
      runEpochs,
      inFlight: flight.map((f) => ({
        epoch: f.groupEpoch,
        kafka: '',
        mysql: '',
        step: `group ${group} epoch ${f.groupEpoch} (${f.members}): ${f.step}`,
      })),
      ...(lastCommitAt !== undefined ? { lastCommitAt } : {}),
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
  setHandler(addMembersSignal, (added) => {
    for (const m of added) if (!members.some((x) => x.id === m.id) && !joins.some((x) => x.id === m.id)) joins.push(m);
  });

  const carried = new Map((input.state?.members ?? []).map((m) => [m.id, m]));
  const reconciled = await acts.reconcileGroup.executeWithOptions(
    { ...opts.admin, summary: `reconcile group ${group}: partitions ${members.map((m) => m.id).join(' ')}` },
    [
      {
        spec,
        group,
        members,
        ...(input.state
          ? { expected: input.state.members.map(({ id, epoch, offset }) => ({ id, epoch, offset })) }
          : {}),
      },
    ],
  );
  state = reconciled.positions.map((p) => ({ ...(carried.get(p.id) ?? zero(p)), epoch: p.epoch, offset: p.offset }));
  if (!input.state) upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.pipeline, value: spec.name }]);
  shownEpoch.start(groupEpoch);

  const prepare = (): Promise<GroupPrepareResult> => {
    const covering = describeMembers(state);
    inFlight.set(groupEpoch, { members: covering, step: 'preparing' });
    return acts.prepareGroup
      .executeWithOptions(
        { ...opts.prepare, summary: `group ${group} epoch ${groupEpoch}: prepare (partitions ${covering})` },
        [{ spec, group, members, groupEpoch, positions: positions(), noWait: control.drain }],
      )
      .then((r) => {
        settle(groupEpoch, r);
        return r;
      });
  };
  const settle = (e: number, r: GroupPrepareResult | undefined) => {
    if (r?.kind === 'prepared') inFlight.set(e, { members: describeMembers(r.members), step: 'prepared' });
    else inFlight.delete(e);
  };
  /** Commits p (and, overlapping, prepares the next group epoch). If that fails for good, p — decided — is still committed before the failure ends the group. */
  const commitAndMaybeNext = async (
    p: PreparedGroupEpoch,
    overlapNext: boolean,
  ): Promise<GroupCommitResult & { next?: GroupPrepareResult }> => {
    setPhase('committing');
    inFlight.set(p.groupEpoch, { members: describeMembers(p.members), step: 'committing' });
    const covering = describeMembers(p.members);
    const commitOnly = () =>
      CancellationScope.nonCancellable(() =>
        acts.commitGroup.executeWithOptions(
          { ...opts.commit, summary: `group ${group} epoch ${p.groupEpoch}: commit (partitions ${covering})` },
          [{ spec, group, members, prepared: p }],
        ),
      );
    if (!overlapNext) return commitOnly();
    const after = advancePositions(positions(), p);
    inFlight.set(p.groupEpoch + 1, { members: describeMembers(after), step: 'preparing' });
    try {
      const a = await CancellationScope.nonCancellable(() =>
        acts.advanceGroup.executeWithOptions(
          {
            ...opts.advance,
            summary: `group ${group} epoch ${p.groupEpoch}: commit (partitions ${covering}), prepare epoch ${p.groupEpoch + 1}`,
          },
          [{ spec, group, members, prepared: p, positions: positions(), noWait: control.drain }],
        ),
      );
      settle(p.groupEpoch + 1, a.next);
      return a;
    } catch (e) {
      inFlight.delete(p.groupEpoch + 1);
      const c = await commitOnly();
      if (c.kafka === 'aborted') await redo(p, c.split);
      throw e;
    }
  };
  const redo = (p: PreparedGroupEpoch, split?: KafkaSplit) => {
    setPhase('redoing');
    lastError = redoReason(`group ${group} epoch ${p.groupEpoch}`, split);
    return CancellationScope.nonCancellable(() =>
      acts.redoGroupKafka.executeWithOptions(
        {
          ...opts.commit,
          summary: `group ${group} epoch ${p.groupEpoch}: redo Kafka side (partitions ${describeMembers(p.members)})`,
        },
        [{ spec, group, members, prepared: p }],
      ),
    );
  };
  const results = (reason: PartitionResult['reason']): PartitionResult[] =>
    state.map((m) => ({ pipeline: spec.name, partition: m.id, state: partitionState(m), reason }));

  // The next group epoch's prepare result, which came with the commit of the one before.
  let next: GroupPrepareResult | undefined;
  for (;;) {
    if (!next) {
      if (joins.length) {
        // Nothing is in flight: reconcile the partitions that joined and take them in.
        const joining = joins;
        joins = [];
        setPhase('preparing');
        const r = await acts.reconcileGroup.executeWithOptions(
          {
            ...opts.admin,
            summary: `reconcile partitions ${joining.map((m) => m.id).join(' ')} joining group ${group}`,
          },
          [{ spec, group, members: joining, joining: true }],
        );
        members = [...members, ...joining];
        state = [...state, ...r.positions.map(zero)];
        membersNow(members.map((m) => m.id));
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
      const c = await commitAndMaybeNext(r, !lastOfRun && !control.paused && !control.stop && joins.length === 0);
      next = c.next;
      if (c.kafka === 'aborted') await redo(r, c.split);
      inFlight.delete(r.groupEpoch);
      lastCommitAt = Date.now();
      state = state.map((s) => {
        const m = r.members.find((x) => x.id === s.id);
        if (!m) return s;
        const after = afterEpoch(s, m);
        return {
          ...after,
          id: s.id,
          redos: s.redos + (c.kafka === 'aborted' ? 1 : 0),
          mysqlRedos: s.mysqlRedos + (c.mysql === 'redone' ? 1 : 0),
        };
      });
      groupEpoch = r.groupEpoch + 1;
      shownEpoch.committed(groupEpoch);
    }
    runEpochs++;
    if (!next && (runEpochs >= spec.epochsPerRun || workflowInfo().continueAsNewSuggested)) {
      await condition(allHandlersFinished);
      const carry: GroupState = { groupEpoch, members: state };
      return continueAsNew<typeof groupWorkflow>({
        spec,
        group,
        members: [...members, ...joins],
        state: carry,
        control,
      });
    }
  }
}
