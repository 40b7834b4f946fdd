/**
 * The epoch protocol's activities, composed from one factory per concern, each built from the
 * injected clients (src/activities/context.ts):
 *   setup      describeSource                      topics and tables of a pipeline
 *   reconcile  reconcile                           before a partition runs: agree, recover
 *   prepare    prepareEpoch                        phase 1: both participants pre-committed
 *   commit     commitEpoch, abortPrepared          phase 3 (and commitKafka/commitMysql of older runs)
 *   advance    advanceEpoch                        phase 3 of e and phase 1 of e+1 in one activity
 *   group      reconcileGroup, prepareGroup,       the same for a partition group (spec.parallelism):
 *              advanceGroup, commitGroup,          one transaction and one XA branch per group epoch
 *              redoGroupKafka
 *   redo       redoKafka                           a broker-aborted Kafka side, produced again
 * The states and moves they implement: src/protocol/epoch.ts.
 */
import { activityContext, type ActivityDeps } from './context';
import { createAdvance } from './advance';
import { createCommit } from './commit';
import { createGroup } from './group';
import { createPrepare } from './prepare';
import { createReconcile } from './reconcile';
import { createRedo } from './redo';
import { createSetup } from './setup';

export function createActivities(deps: ActivityDeps) {
  const ctx = activityContext(deps);
  return { ...createSetup(ctx), ...createReconcile(ctx), ...createPrepare(ctx), ...createCommit(ctx), ...createAdvance(ctx), ...createRedo(ctx), ...createGroup(ctx) };
}

export type Activities = ReturnType<typeof createActivities>;
export type { ActivityDeps } from './context';
export type { PrepareArgs } from './prepare';
export type { ObservedEvent, PrepareSplit } from './observe';
