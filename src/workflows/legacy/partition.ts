/**
 * LEGACY — the loop of an ungrouped partition before the one engine (src/workflows/engine.ts),
 * kept unchanged so that histories recorded before ONE_ENGINE_PATCH replay, and so that runs
 * still inside such a history go on until their next continue-as-new (which starts the engine),
 * and runs without a SourceRef (started before source discovery) go on in it for good.
 * Do not change what it schedules; its activities are adapters (src/activities/legacy.ts).
 *
 * One source partition of a pipeline: every checkpoint epoch is a step of this workflow.
 *   1 prepare(epoch, offset)  → { end, Kafka handle, xid }   (the result in history is the decision)
 *   2 commit Kafka ∥ commit MySQL, in one activity             (idempotent, from any worker)
 *   3 redo the Kafka side if the broker aborted it (timeout)
 *   4 offset = end, epoch += 1; continue-as-new when history grows
 */
import {
  CancellationScope,
  condition,
  continueAsNew,
  patched,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
  allHandlersFinished,
} from '@temporalio/workflow';
import type { Activities } from '../../activities';
import {
  afterEpoch,
  applyControl,
  assertTransition,
  redoReason,
  validateControl,
  type Control,
  type KafkaSplit,
  type PartitionInput,
  type PartitionState,
  type Phase,
  type KafkaCommitOutcome,
  type MysqlCommitOutcome,
  type PrepareResult,
  type PreparedEpoch,
} from '../../protocol';
import {
  afterCommit,
  describe,
  nextStep,
  openEpoch,
  prepared as preparedEpoch,
  type EpochState,
} from '../../protocol/epoch';
import { SEARCH_ATTRIBUTES } from '../../search-attributes';
import { epochActivityOptions } from '../activity-options';
import { epochAttribute } from '../epoch-attribute';
import type { PipelineSpec } from '../../spec';
import { controlSignal, controlUpdate, statusQuery, type PartitionResult } from '../interface';
import type { partitionWorkflow } from '../partition';

/**
 * Pipelined epochs: prepare(e+1) runs while epoch e commits, so the Temporal round trips and
 * the commits of e overlap the data movement of e+1. Safe because
 *  - e+1 uses the next transactional id of the pool (≥ 2) and prepare(e+2), which reuses e's id,
 *    starts only after e's commit (and redo) finished: no InitProducerId on an id whose
 *    transaction awaits its decision;
 *  - with direct MySQL writes, prepare(e+1) opens its XA branch only once e's ledger row is
 *    committed (afterCommitOf), so it never waits on e's row locks and a MySQL redo of e never
 *    waits on e+1's; staged writes lock only keys private to the epoch and do not wait;
 *  - commits stay in epoch order (commit e+1 is scheduled after commit e completed);
 *  - if the broker aborted e (timeout), a prepared e+1 is withdrawn before e is redone and then
 *    prepared again, so e's redo precedes e+1 in the output log;
 *  - nothing prepared is left in flight at continue-as-new, pause or stop.
 * Runs recorded before this patch replay the sequential loop.
 */
export const PIPELINED_EPOCHS_PATCH = 'pipelined-epochs-v1';

/**
 * One commit activity per epoch (commitEpoch: EndTxn ∥ XA COMMIT inside one activity) instead of
 * two, and no search-attribute update for the preparing ↔ committing alternation of a running
 * partition (the phase search attribute then reads 'preparing' while epochs run; the status
 * query still has the live phase). Both cut Temporal's work per epoch: one activity dispatch,
 * one workflow task and up to two visibility updates less. Runs recorded before replay the
 * two-activity loop.
 */
export const COMMIT_EPOCH_PATCH = 'commit-epoch-v1';

/**
 * One activity per epoch (advanceEpoch: commit e and prepare e+1 together, src/activities/advance.ts)
 * instead of commitEpoch(e) ∥ prepareEpoch(e+1): per epoch one activity dispatch and one
 * workflow task less, and one activity slot per partition instead of two. The same guarantees
 * as the pipelined loop above; e+1 is withdrawn inside the activity when e must be redone, so
 * the loop never holds a prepared e+1 across a redo. Runs recorded before replay the
 * two-activity loop, and so do runs whose spec says twoActivityLoop (below).
 */
export const ADVANCE_EPOCH_PATCH = 'advance-epoch-v1';

/**
 * `epoch.commitWithNextPrepare: false`, a benchmark knob that is no longer a setting
 * (definePipeline refuses it, REMOVED_SETTINGS in src/spec.ts): specs recorded while it was one
 * may still carry it, and their runs — replayed, or continued as new — keep the two-activity
 * loop they ran (ADVANCE_EPOCH_PATCH is not even asked then, as it was not when they ran).
 */
const twoActivityLoop = (spec: PipelineSpec): boolean =>
  (spec.epoch as { commitWithNextPrepare?: unknown }).commitWithNextPrepare === false;

export async function runPartition(input: PartitionInput): Promise<PartitionResult> {
  const { spec, partition } = input;
  // Where to read and how to partition outputs; passed to every activity (absent in older runs).
  const src = input.source ? { source: input.source } : {};
  const opts = epochActivityOptions(spec);
  const acts = proxyActivities<Activities>(opts.commit);
  const pipelined = patched(PIPELINED_EPOCHS_PATCH);
  const oneCommit = patched(COMMIT_EPOCH_PATCH);
  const merged = !twoActivityLoop(spec) && patched(ADVANCE_EPOCH_PATCH);

  let control: Control = input.control ?? { paused: false, drain: false, stop: false };
  let phase: Phase = 'reconciling';
  let lastError: string | undefined;
  /** The split the last commit found, if any (the redo's reason says so). */
  let lastSplit: KafkaSplit | undefined;
  let runEpochs = 0;
  let state: PartitionState = input.state ?? {
    epoch: 0,
    offset: 0,
    committedEpochs: 0,
    records: 0,
    deadLetters: 0,
    redos: 0,
    mysqlRedos: 0,
  };

  const shownEpoch = epochAttribute();
  const running = (p: Phase) => p === 'preparing' || p === 'committing';
  const setPhase = (to: Phase) => {
    if (to === phase) return;
    assertTransition(phase, to);
    const quiet = oneCommit && running(phase) && running(to);
    phase = to;
    if (quiet) return;
    shownEpoch.flush();
    upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.phase, value: to }]);
  };

  // Epochs in flight (at most two: e committing while e+1 prepares), for the status query only.
  const inFlight = new Map<number, EpochState>();
  const staged = (spec.mysqlSink.mode ?? 'direct') === 'staged';
  let lastCommitAt: number | undefined;
  setHandler(statusQuery, () => ({
    pipeline: spec.name,
    partition,
    phase,
    state,
    control,
    lastError,
    runEpochs,
    inFlight: [...inFlight.values()].map((e) => ({
      epoch: e.epoch,
      kafka: e.kafka,
      mysql: e.mysql,
      step: describe(e),
    })),
    ...(lastCommitAt !== undefined ? { lastCommitAt } : {}),
  }));
  setHandler(
    controlUpdate,
    (action) => {
      control = applyControl(control, action);
      return control;
    },
    { validator: (action) => validateControl(action, control) },
  );
  setHandler(controlSignal, (action) => {
    try {
      validateControl(action, control);
      control = applyControl(control, action);
    } catch {
      // Signals cannot answer; a control that does not apply any more is ignored.
    }
  });

  const reconciled = await acts.reconcile.executeWithOptions(
    { ...opts.admin, summary: `reconcile partition ${partition}` },
    [{ spec, partition, ...src, ...(input.state ? { expected: { epoch: state.epoch, offset: state.offset } } : {}) }],
  );
  state = { ...state, epoch: reconciled.epoch, offset: reconciled.offset };
  upsertSearchAttributes([
    { key: SEARCH_ATTRIBUTES.pipeline, value: spec.name },
    { key: SEARCH_ATTRIBUTES.partition, value: partition },
    { key: SEARCH_ATTRIBUTES.epoch, value: state.epoch },
  ]);
  shownEpoch.start(state.epoch, true);

  const prepare = (epoch: number, offset: number, afterCommitOf?: number): Promise<PrepareResult> => {
    inFlight.set(epoch, openEpoch(epoch, staged));
    return acts.prepareEpoch
      .executeWithOptions({ ...opts.prepare, summary: `epoch ${epoch}: prepare from offset ${offset}` }, [
        {
          spec,
          partition,
          ...src,
          epoch,
          offset,
          noWait: control.drain,
          ...(afterCommitOf !== undefined ? { afterCommitOf } : {}),
        },
      ])
      .then((r) => {
        if (r.kind === 'prepared') inFlight.set(epoch, preparedEpoch(epoch, staged));
        else inFlight.delete(epoch);
        return r;
      });
  };
  // The next epoch's prepare, started while the current epoch commits (pipelined runs only);
  // with advanceEpoch it has already completed (its result came with the commit of the epoch before).
  let next: Promise<PrepareResult> | undefined;

  for (;;) {
    if (!next) {
      if (control.paused && !control.stop) {
        setPhase('paused');
        await condition(() => !control.paused || control.stop);
      }
      if (control.stop) {
        setPhase('stopped');
        return { pipeline: spec.name, partition, state, reason: 'stopped' };
      }
    }
    setPhase('preparing');
    const r = next ? await next : await prepare(state.epoch, state.offset);
    next = undefined;
    if (r.kind === 'empty') {
      if (control.drain) {
        setPhase('done');
        return { pipeline: spec.name, partition, state, reason: 'drained' };
      }
    } else {
      const lastOfRun = runEpochs + 1 >= spec.epochsPerRun || workflowInfo().continueAsNewSuggested;
      const overlap = pipelined && !lastOfRun && !control.paused && !control.stop;
      let epochState: EpochState;
      if (merged && overlap) {
        const a = await advanceEpoch(r);
        epochState = a.state;
        if (a.next) next = Promise.resolve(a.next);
      } else {
        const committing = commitEpoch(r);
        if (overlap) {
          next = prepare(r.epoch + 1, r.end, r.epoch);
          // Awaited in the next iteration; a failure must not count as unhandled before that.
          next.catch(() => undefined);
        }
        epochState = await committing;
      }
      if (nextStep(epochState) === 'redo-kafka') {
        // Epoch e's Kafka side was aborted by the broker and must be redone. A pipelined e+1 may
        // already have written to the output partitions: withdraw it first, so that e's redo
        // precedes e+1 in the log (source order), and prepare e+1 again afterwards.
        if (next) {
          const n = await next;
          next = undefined;
          if (n.kind === 'prepared') {
            inFlight.delete(n.epoch);
            await acts.abortPrepared.executeWithOptions(
              { ...opts.commit, summary: `epoch ${n.epoch}: withdraw (epoch ${r.epoch} is redone first)` },
              [{ spec, partition, ...src, prepared: n }],
            );
          }
        }
        await redoEpoch(r);
      }
      inFlight.delete(r.epoch);
      lastCommitAt = Date.now();
      state = afterEpoch(state, r);
      shownEpoch.committed(state.epoch);
    }
    runEpochs++;
    if (!next && (runEpochs >= spec.epochsPerRun || workflowInfo().continueAsNewSuggested)) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof partitionWorkflow>({ spec, partition, ...src, state, control });
    }
  }

  /** Records commit outcomes in the epoch's state (kafka 'aborted' = the caller must redo). */
  function committed(
    p: PreparedEpoch,
    kafka: KafkaCommitOutcome,
    mysql: MysqlCommitOutcome,
    split?: KafkaSplit,
  ): EpochState {
    lastSplit = split;
    if (mysql === 'redone') state = { ...state, mysqlRedos: state.mysqlRedos + 1 };
    const after = afterCommit(inFlight.get(p.epoch) ?? preparedEpoch(p.epoch, staged), kafka, mysql);
    inFlight.set(p.epoch, after);
    return after;
  }

  /**
   * Commits p and prepares the epoch after it, in one activity. Without `next`, e+1 was
   * withdrawn (p must be redone first) and is prepared again after the redo. If the activity
   * fails for good (e.g. e+1's prepare was refused a permission), p is still committed by
   * commitEpoch — it is decided — before the failure ends the partition.
   */
  async function advanceEpoch(p: PreparedEpoch): Promise<{ state: EpochState; next?: PrepareResult }> {
    setPhase('committing');
    inFlight.set(p.epoch + 1, openEpoch(p.epoch + 1, staged));
    const a = await CancellationScope.nonCancellable(() =>
      acts.advanceEpoch.executeWithOptions(
        { ...opts.advance, summary: `epoch ${p.epoch}: commit, and prepare epoch ${p.epoch + 1} from offset ${p.end}` },
        [{ spec, partition, ...src, prepared: p, noWait: control.drain }],
      ),
    ).catch(async (e: unknown) => {
      inFlight.delete(p.epoch + 1);
      if (nextStep(await commitEpoch(p)) === 'redo-kafka') await redoEpoch(p);
      throw e;
    });
    if (a.next?.kind === 'prepared') inFlight.set(p.epoch + 1, preparedEpoch(p.epoch + 1, staged));
    else inFlight.delete(p.epoch + 1);
    return { state: committed(p, a.kafka, a.mysql, a.split), ...(a.next ? { next: a.next } : {}) };
  }

  /** Commits both sides; resolves to the epoch's state after the commit (kafka 'aborted' = the caller must redo). */
  function commitEpoch(p: PreparedEpoch): Promise<EpochState> {
    setPhase('committing');
    // The decision is in history; the commits must finish even if the workflow is cancelled.
    return CancellationScope.nonCancellable(async () => {
      const args = [{ spec, partition, ...src, prepared: p }] as const;
      const { kafka, mysql, split } = oneCommit
        ? await acts.commitEpoch.executeWithOptions(
            { ...opts.commit, summary: `epoch ${p.epoch}: commit (EndTxn ∥ XA COMMIT)` },
            [...args],
          )
        : await Promise.all([
            acts.commitKafka.executeWithOptions(
              { ...opts.commit, summary: `epoch ${p.epoch}: commit Kafka transaction` },
              [...args],
            ),
            acts.commitMysql.executeWithOptions({ ...opts.commit, summary: `epoch ${p.epoch}: XA COMMIT` }, [...args]),
          ]).then(([k, m]) => ({ kafka: k, mysql: m, split: undefined }));
      return committed(p, kafka, mysql, split);
    });
  }

  function redoEpoch(p: PreparedEpoch): Promise<void> {
    setPhase('redoing');
    lastError = redoReason(`epoch ${p.epoch}`, lastSplit);
    return CancellationScope.nonCancellable(async () => {
      await acts.redoKafka.executeWithOptions({ ...opts.commit, summary: `epoch ${p.epoch}: redo Kafka side` }, [
        { spec, partition, ...src, prepared: p },
      ]);
      state = { ...state, redos: state.redos + 1 };
    });
  }
}
