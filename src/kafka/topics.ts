/**
 * Creating topics so that they can be used at once. CreateTopics returns before every broker's
 * metadata knows the new partitions, and kafkajs's own `waitForLeaders` fails outright ("This
 * server does not host this topic-partition") when it asks a broker that has not caught up —
 * seen with 64 partitions on one broker and on a 3-broker cluster. So: create without waiting,
 * then poll the metadata until every partition has a leader, treating "unknown topic" answers
 * as not yet; and then until every leader answers ListOffsets for it, because a leader named in
 * the metadata may still answer NOT_LEADER for ~200 ms (64 partitions: dozens of such answers;
 * a test's first offsets query on its new topic failed on it). Offset queries and
 * single-partition reads later go through onLeader in ./internals/cluster, which asks again
 * while leadership settles after a move; the epoch read (fetchPartitions) refreshes the metadata
 * and fails, and the activity's retry asks again.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Admin, ITopicConfig } from 'kafkajs';
import { errorMessage, TransientError } from '../errors';
import { pollUntil } from '../poll';

/** Creates `topics` (false if one existed already) and waits until every partition of each has a leader that answers for it. */
export async function createTopicsReady(admin: Admin, topics: ITopicConfig[], timeoutMs = 60_000): Promise<boolean> {
  const created = await admin.createTopics({ waitForLeaders: false, topics });
  const want = new Map(topics.map((t) => [t.topic, t.numPartitions ?? 1]));
  let last = 'no metadata yet';
  return pollUntil(
    async () => {
      try {
        const meta = await admin.fetchTopicMetadata({ topics: [...want.keys()] });
        const notReady = meta.topics.filter(
          (t) => t.partitions.length < (want.get(t.name) ?? 1) || t.partitions.some((p) => p.leader < 0),
        );
        if (meta.topics.length === want.size && notReady.length === 0) {
          // Every leader answers for its partitions (a ListOffsets per topic), or the catch waits.
          for (const t of want.keys()) await admin.fetchTopicOffsets(t);
          return created;
        }
        last = `no leader yet for ${notReady.map((t) => t.name).join(', ') || 'every topic'}`;
      } catch (e) {
        last = errorMessage(e); // e.g. UNKNOWN_TOPIC_OR_PARTITION while the metadata propagates, NOT_LEADER while leadership settles
      }
      return undefined;
    },
    {
      timeoutMs,
      everyMs: 200,
      onTimeout: () =>
        new Error(
          `topics ${[...want.keys()].join(', ')} were created but not every partition has a leader that answers after ${timeoutMs / 1000} s: ${last}`,
        ),
    },
  );
}

/** Partitions of each topic; 0 for a topic that does not exist. */
export async function partitionCounts(admin: Admin, topics: string[]): Promise<Map<string, number>> {
  const existing = new Set(await admin.listTopics());
  const present = [...new Set(topics)].filter((t) => existing.has(t));
  const out = new Map<string, number>(topics.map((t) => [t, 0]));
  if (present.length)
    for (const t of (await admin.fetchTopicMetadata({ topics: present })).topics) out.set(t.name, t.partitions.length);
  return out;
}

/**
 * Partitions of each topic of `topics`, asking again until each topic of `known` — topics that
 * exist (listed earlier, or created or found existing by this caller) — is listed with its
 * partitions. On a cluster the node that answers may not have learnt a topic created moments ago
 * and answers without it; that is not "the topic does not exist". After `timeoutMs` a topic of
 * `known` still invisible is a TransientError (retryable), never a configuration error.
 */
export async function partitionCountsOfKnown(
  admin: Admin,
  topics: string[],
  known: string[] = topics,
  timeoutMs = 30_000,
): Promise<Map<string, number>> {
  let last = '';
  return pollUntil(
    async () => {
      try {
        const counts = await partitionCounts(admin, topics);
        const invisible = known.filter((t) => (counts.get(t) ?? 0) === 0);
        if (invisible.length === 0) return counts;
        last = `not yet listed with partitions: ${invisible.join(', ')}`;
      } catch (e) {
        last = errorMessage(e); // e.g. UNKNOWN_TOPIC_OR_PARTITION from a node that has not caught up
      }
      return undefined;
    },
    {
      timeoutMs,
      everyMs: 250,
      onTimeout: () =>
        new TransientError(
          `topics exist but the brokers' metadata does not show them after ${timeoutMs / 1000} s (${last}); retrying`,
          { topics: known },
        ),
    },
  );
}

/**
 * Which of `topics` do not exist, asked again for `settleMs` before a topic counts as missing:
 * a node behind the controller answers without topics created moments ago.
 */
export async function missingTopics(
  admin: Admin,
  topics: string[],
  settleMs = 5_000,
): Promise<{ existing: Set<string>; missing: string[] }> {
  const deadline = Date.now() + settleMs;
  for (;;) {
    const existing = new Set(await admin.listTopics());
    const missing = topics.filter((t) => !existing.has(t));
    if (missing.length === 0 || Date.now() > deadline) return { existing, missing };
    await sleep(250);
  }
}
