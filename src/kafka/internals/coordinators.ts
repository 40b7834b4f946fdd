/**
 * Which broker coordinates a transactional id or a consumer group, asked once and remembered.
 *
 * kafkajs 2.2.4 sends FindCoordinator before every transactional request (InitProducerId,
 * AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit's group coordinator) and never keeps the
 * answer: four sequential round trips of a prepare, and one more per EndTxn, that change nothing
 * while the coordinator stays put. Kafka's Java producer keeps its coordinator until an answer
 * says it moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) or the connection to it fails; so
 * does this cache.
 */
/* eslint-disable @typescript-eslint/no-explicit-any */

/** FindCoordinator's key types. */
export const COORDINATOR = { GROUP: 0, TRANSACTION: 1 } as const;
export type CoordinatorType = (typeof COORDINATOR)[keyof typeof COORDINATOR];

/**
 * A broker's answers (kafkajs's names for NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE) that
 * say it no longer coordinates the key: ask FindCoordinator again.
 */
const STALE_COORDINATOR = ['NOT_COORDINATOR_FOR_GROUP', 'GROUP_COORDINATOR_NOT_AVAILABLE'];

/** Errors after which a remembered coordinator is forgotten: a stale answer, or no answer at all (connection refused, closed, timed out). */
function coordinatorIsStale(e: unknown): boolean {
  const type = (e as { type?: unknown } | undefined)?.type;
  return typeof type !== 'string' || STALE_COORDINATOR.includes(type);
}

/**
 * The coordinator of `key` as a broker whose requests forget it when they fail as
 * coordinatorIsStale says; `raw` is the kafkajs Cluster (its FindCoordinator is asked on a miss,
 * its broker pool connects the remembered node). A failure forgets only the node it came from: a
 * late stale answer from the old coordinator, after a concurrent request has already learnt the
 * new one, leaves the new one remembered.
 */
export function coordinatorCache(raw: any): (key: string, type: CoordinatorType) => Promise<any> {
  const known = new Map<string, string>();
  return async (key, type) => {
    const id = `${type}:${key}`;
    let broker: any;
    const nodeId = known.get(id);
    if (nodeId !== undefined) {
      // findBroker reconnects a known node; a node gone from the metadata throws, and is asked for again.
      broker = await raw.findBroker({ nodeId }).catch(() => undefined);
    }
    if (broker === undefined) {
      known.delete(id);
      broker = await raw.findGroupCoordinator({ groupId: key, coordinatorType: type });
      known.set(id, String(broker.nodeId));
    }
    const from = String(broker.nodeId);
    return forgetOnStale(broker, (e) => {
      if (coordinatorIsStale(e) && known.get(id) === from) known.delete(id);
    });
  };
}

/** `broker` whose method calls pass every failure to `onError` before it reaches the caller. */
function forgetOnStale(broker: any, onError: (e: unknown) => void): any {
  return new Proxy(broker, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        try {
          const r = v.apply(target, args);
          return r instanceof Promise
            ? r.catch((e: unknown) => {
                onError(e);
                throw e;
              })
            : r;
        } catch (e) {
          onError(e);
          throw e;
        }
      };
    },
  });
}
