/**
 * Creating topics so that they can be used at once. CreateTopics returns before every broker's
 * metadata knows the new partitions, and kafkajs's own `waitForLeaders` fails outright ("This
 * server does not host this topic-partition") when it asks a broker that has not caught up —
 * seen with 64 partitions on one broker and on a 3-broker cluster. So: create without waiting,
 * then poll the metadata until every partition has a leader, treating "unknown topic" answers
 * as not yet.
 */
import type { Admin, ITopicConfig } from 'kafkajs';
import { errorMessage } from '../errors';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Creates `topics` (false if one existed already) and waits until every partition of each has a leader. */
export async function createTopicsReady(admin: Admin, topics: ITopicConfig[], timeoutMs = 60_000): Promise<boolean> {
  const created = await admin.createTopics({ waitForLeaders: false, topics });
  const want = new Map(topics.map((t) => [t.topic, t.numPartitions ?? 1]));
  const deadline = Date.now() + timeoutMs;
  let last = 'no metadata yet';
  for (;;) {
    try {
      const meta = await admin.fetchTopicMetadata({ topics: [...want.keys()] });
      const notReady = meta.topics.filter((t) => t.partitions.length < (want.get(t.name) ?? 1) || t.partitions.some((p) => p.leader < 0));
      if (meta.topics.length === want.size && notReady.length === 0) return created;
      last = `no leader yet for ${notReady.map((t) => t.name).join(', ') || 'every topic'}`;
    } catch (e) {
      last = errorMessage(e); // e.g. UNKNOWN_TOPIC_OR_PARTITION while the metadata propagates
    }
    if (Date.now() > deadline) throw new Error(`topics ${[...want.keys()].join(', ')} were created but not every partition has a leader after ${timeoutMs / 1000} s: ${last}`);
    await sleep(200);
  }
}

/** Partitions of each topic; 0 for a topic that does not exist. */
export async function partitionCounts(admin: Admin, topics: string[]): Promise<Map<string, number>> {
  const existing = new Set(await admin.listTopics());
  const present = [...new Set(topics)].filter((t) => existing.has(t));
  const out = new Map<string, number>(topics.map((t) => [t, 0]));
  if (present.length) for (const t of (await admin.fetchTopicMetadata({ topics: present })).topics) out.set(t.name, t.partitions.length);
  return out;
}
