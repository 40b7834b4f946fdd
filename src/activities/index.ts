/**
 * The epoch protocol's activities, composed from one factory per concern, each built from the
 * injected clients (src/activities/context.ts). Each works over the members of a unit
 * (src/protocol/group.ts: a partition group, or an ungrouped partition as a group of one):
 *   setup      describeSource       topics and tables of a pipeline
 *   reconcile  reconcileMembers     before a unit runs (or members join it): agree, recover
 *   prepare    prepareMembers       phase 1: both participants pre-committed
 *   advance    advanceMembers       phase 3 of e and phase 1 of e+1 in one activity
 *   decided    (no activity)        an epoch committed by the worker that prepared it, as soon as
 *                                   its prepare result is in history (commit on decision)
 *   commit     commitMembers,       phase 3 alone (the last epoch of a run), and the redo of a
 *              redoMembers          broker-aborted Kafka side
 *   legacy     the names older histories call (src/workflows/legacy/), as thin adapters
 * The states and moves they implement, and ask before acting: src/protocol/epoch.ts.
 */
import { activityContext, type ActivityDeps } from './context';
import { createAdvance } from './advance';
import { createCommit } from './commit';
import { createLegacy } from './legacy';
import { createPrepare } from './prepare';
import { createReconcile } from './reconcile';
import { createSetup } from './setup';

export function createActivities(deps: ActivityDeps) {
  const ctx = activityContext(deps);
  return {
    ...createSetup(ctx),
    ...createReconcile(ctx),
    ...createPrepare(ctx),
    ...createCommit(ctx),
    ...createAdvance(ctx),
    ...createLegacy(ctx),
  };
}

export type Activities = ReturnType<typeof createActivities>;
export type { ActivityDeps } from './context';
export type { PrepareArgs } from './legacy';
export type { ObservedEvent, PrepareSplit } from './observe';
