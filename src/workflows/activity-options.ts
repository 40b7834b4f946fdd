/**
 * The activity options of the partition, group and pipeline workflows, in one place. Each
 * activity call adds only its summary. The values are those of the recorded runs (test/histories):
 * timeouts and retry policy are not checked on replay, but changing one changes how every
 * running pipeline retries.
 */
import type { ActivityOptions } from '@temporalio/workflow';
import { NON_RETRYABLE_TYPES } from '../errors';
import type { PipelineSpec } from '../spec';

const retry = {
  initialInterval: '500ms',
  backoffCoefficient: 2,
  maximumInterval: '5s',
  nonRetryableErrorTypes: [...NON_RETRYABLE_TYPES],
};

export interface EpochActivityOptions {
  /** prepareMembers (prepareEpoch, prepareGroup in the legacy loops): the source wait (spec.epoch.maxWaitMs) plus two minutes. */
  prepare: ActivityOptions;
  /** advanceMembers (advanceEpoch, advanceGroup): a commit beside the next prepare; one minute more than prepare. */
  advance: ActivityOptions;
  /** Commits, redos, withdrawals: the default of the workflow's activity proxy. */
  commit: ActivityOptions;
  /** reconcileMembers (reconcile, reconcileGroup). */
  admin: ActivityOptions;
}

/** A dead worker is noticed by the heartbeat timeout; a hung one by start-to-close. */
export function epochActivityOptions(spec: Pick<PipelineSpec, 'epoch'>): EpochActivityOptions {
  const prepare: ActivityOptions = {
    startToCloseTimeout: spec.epoch.maxWaitMs + 120_000,
    heartbeatTimeout: '10s',
    retry,
  };
  return {
    prepare,
    advance: { ...prepare, startToCloseTimeout: spec.epoch.maxWaitMs + 180_000 },
    commit: { startToCloseTimeout: '180s', heartbeatTimeout: '10s', retry },
    admin: { startToCloseTimeout: '120s', heartbeatTimeout: '10s', retry },
  };
}

/** The pipeline workflow's describeSource (its retry policy names no backoff coefficient: the default, 2). */
export const PIPELINE_ACTIVITY_OPTIONS: ActivityOptions = {
  startToCloseTimeout: '120s',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '500ms', maximumInterval: '5s', nonRetryableErrorTypes: [...NON_RETRYABLE_TYPES] },
};
