/**
 * What every activity is built from: the injected clients (created once per worker, kept warm),
 * the transforms, fault injection and the observer — plus the helpers they share.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import { notAuthorized, OnceflowError } from '../errors';
import { Faults, type FaultPoint, type SplitCommits } from '../faults';
import type { KafkaCluster } from '../kafka/internals';
import { detectDialect, type Dialect } from '../mysql/sink';
import { IllegalMove } from '../protocol/epoch';
import type { PipelineSpec } from '../spec';
import type { TransformRegistry } from '../transforms/registry';
import { DecidedCommits } from './decided';
import type { ObservedEvent } from './observe';

export interface ActivityDeps {
  cluster: KafkaCluster;
  admin: Admin;
  pool: Pool;
  transforms: TransformRegistry;
  /** Replication factor of the topics setup creates (settings.kafka.replicationFactor); -1 or absent: the broker's default. */
  replicationFactor?: number;
  faults?: Faults;
  /** Observer for metrics (records, phases, redos); optional. */
  observe?: (event: ObservedEvent) => void;
  /** The worker's early commits (./decided.ts); the worker drains them before it closes its clients. */
  decided?: DecidedCommits;
}

/** The current activity attempt's number. */
export const attempt = (): number => Context.current().info.attempt;

/**
 * The current attempt's fencing token: when the Temporal server scheduled it (ms). A later
 * attempt of the same activity, or any later activity, has a larger token (src/mysql/xid.ts).
 */
export const attemptToken = (): number => Context.current().info.currentAttemptScheduledTimestampMs;

export function activityContext(deps: ActivityDeps) {
  const faults = deps.faults ?? new Faults();
  let dialect: Dialect | undefined;
  return {
    ...deps,
    observe: deps.observe ?? (() => undefined),
    decided: deps.decided ?? new DecidedCommits(),
    dialect: async () => (dialect ??= await detectDialect(deps.pool)),
    hit: (
      point: FaultPoint,
      at: { partition: number; epoch: number },
      split?: (commits: SplitCommits) => Promise<void>,
    ) => faults.hit(point, { ...at, attempt: attempt() }, split),
    heartbeat: () => Context.current().heartbeat(),
    /** A line in the worker's log (Temporal's activity logger: the activity's workflow, type and attempt are added). */
    warn: (message: string, attrs: Record<string, unknown> = {}) => Context.current().log.warn(message, attrs),
    error: (message: string, attrs: Record<string, unknown> = {}) => Context.current().log.error(message, attrs),
    transformCtx: (spec: PipelineSpec, partition: number, epoch: number) => ({
      pipeline: spec.name,
      partition,
      epoch,
      attempt: attempt(),
      options: spec.transformOptions ?? {},
    }),
  };
}

export type ActivityContext = ReturnType<typeof activityContext>;

/**
 * Maps onceflow's errors to Temporal failures at the activity edge; keeps the worker heartbeating.
 * A permission a service refuses becomes NotAuthorized, naming what to grant: it ends the
 * partition where nothing is decided yet (`decided: false`: set-up and prepare, which leave
 * nothing behind), and is retried where an epoch may be decided and must finish (reconcile's
 * recovery, commit, redo). An IllegalMove (src/protocol/epoch.ts) fails the activity for good.
 */
export async function edge<T>(fn: () => Promise<T>, opts: { decided: boolean } = { decided: true }): Promise<T> {
  const ctx = Context.current();
  const timer = setInterval(() => ctx.heartbeat(), 1000);
  ctx.heartbeat();
  try {
    return await fn();
  } catch (caught) {
    // A move the protocol's table does not allow is a bug, not a fault: fail loudly, never retry into it.
    if (caught instanceof IllegalMove)
      throw ApplicationFailure.create({ message: caught.message, type: caught.name, nonRetryable: true });
    const e = caught instanceof OnceflowError ? caught : (notAuthorized(caught, opts.decided) ?? caught);
    if (e instanceof OnceflowError)
      throw ApplicationFailure.create({
        message: e.message,
        type: e.name,
        nonRetryable: !e.retryable,
        details: [e.details],
      });
    throw e;
  } finally {
    clearInterval(timer);
  }
}
