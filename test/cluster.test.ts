/**
 * On a 3-node KRaft cluster (started here through scripts/services.sh with
 * ONCEFLOW_KAFKA_NODES=3 on its own run directory and port base 24000, stopped at the end): an
 * output partition's leader killed during an epoch's transactional sends.
 *
 * The partition that loses its leader is placed (replica order) so that its new leader is the
 * broker that already answered the same send for the other partition. kafkajs 2.2.4 then
 * resolves the send without ever producing that partition's records (src/kafka/landed.ts): the
 * plain PreparedTransaction reports success and the log lacks the records — a transaction that
 * would commit short. onceflow's prepare uses CountedTransaction + checkLanded: the same send
 * fails (so prepare aborts and redoes the attempt), and a normal epoch passes the check, whose
 * cost per epoch is measured here.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { loadSettings, toolPaths } from '../src/config';
import { TransientError } from '../src/errors';
import { kafkaClientConfig } from '../src/kafka/client-config';
import { connectCluster, earliestOffset, endTxn, PreparedTransaction, type KafkaCluster } from '../src/kafka/internals';
import { checkLanded, CountedTransaction } from '../src/kafka/landed';
import { scanProducerRecords } from './support/scan';
import { createTopicsReady, missingTopics, partitionCountsOfKnown } from '../src/kafka/topics';
import { waitFor } from '../tools/chaos/recovery';
import {
  clusterWhole,
  nodeServices,
  partitionLeader,
  quorumLeader,
  transactionCoordinator,
} from '../tools/chaos/cluster';
import { servicePid, services, type StackOptions } from '../tools/chaos/stack';

const home = process.env.ONCEFLOW_HOME || join(homedir(), '.cache', 'onceflow');
const stack: StackOptions = { runDir: join(home, 'cluster-test-run'), portBase: 24000, workers: 0, kafkaNodes: 3 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let admin: Admin;
let settings: ReturnType<typeof loadSettings>;
let cluster: KafkaCluster;
let brokers: string[];
let kafkaLibs: string;

before(async () => {
  await services(stack, ['up', 'kafka']);
  const env = { ONCEFLOW_SERVICES_ENV: join(stack.runDir, 'services.env') };
  settings = loadSettings(env);
  brokers = settings.kafka.brokers;
  kafkaLibs = toolPaths(env).kafkaLibs!;
  admin = new Kafka({
    ...kafkaClientConfig(settings.kafka, 'onceflow-cluster-test'),
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  cluster = await connectCluster({
    ...kafkaClientConfig(settings.kafka, 'onceflow-cluster-test'),
    logLevel: logLevel.NOTHING,
  });
  // `up` returns once every node listens; a node registers with the quorum a moment later.
  await waitFor('three nodes registered', () => clusterWhole(admin, 3, []), 120_000);
});

after(async () => {
  await Promise.allSettled([admin?.disconnect(), cluster?.disconnect()]);
  await services(stack, ['down']);
});

const messages = (partition: number, n: number, tag: string) =>
  Array.from({ length: n }, (_, i) => ({ key: `${tag}-${i}`, value: `${tag}-${partition}-${i}`, partition }));

/**
 * Sets up a transactional id, a victim that is neither its coordinator nor the quorum's leader,
 * topic[0] led by `answering` and topic[1] led by the victim with `answering` next in its replica
 * order; returns them. The victim is chosen after the coordinator, not a transactional id after
 * the victim: after a cluster start the first node up leads every __transaction_state partition
 * until Kafka's automatic leader rebalance (leader.imbalance.check.interval.seconds, 300 s), and
 * when that node was the victim a search for an id coordinated elsewhere waited those 5 minutes
 * (the fresh-clone CI runs of 2026-12-06 from 05:27 on spent 294.9–295.4 s in it; one at 04:35, 2 s).
 */
async function layout(tag: string, steps: Steps) {
  // DescribeCluster goes to any broker, and a broker's view of the others' registrations may lag
  // its own by a moment after a fresh start (seen in a fresh clone's first run): ask until one says three.
  let ids: number[] = [];
  await waitFor(
    "three nodes registered in the answering broker's view",
    async () => (ids = (await admin.describeCluster()).brokers.map((b) => b.nodeId).sort()).length === 3,
    60_000,
  ).catch(() => undefined);
  assert.equal(ids.length, 3, 'three nodes registered');
  steps.mark('nodes listed');
  const controller = await quorumLeader(kafkaLibs, brokers);
  steps.mark('quorum leader asked');
  const tid = `onceflow.cluster-test.${tag}.0`;
  const coordinator = await transactionCoordinator(cluster, tid);
  steps.mark('coordinator found');
  const victim = ids.find((i) => i !== controller && i !== coordinator)!;
  const answering = ids.find((i) => i !== victim)!;
  const third = ids.find((i) => i !== victim && i !== answering)!;
  const topic = `cluster-${tag}-${Date.now().toString(36)}`;
  await createTopicsReady(admin, [
    {
      topic,
      replicaAssignment: [
        { partition: 0, replicas: [answering, third, victim] },
        { partition: 1, replicas: [victim, answering, third] },
      ],
    },
  ]);
  steps.mark('topic created');
  await waitFor(
    'leaders as assigned',
    async () =>
      (await partitionLeader(admin, topic, 0)) === answering && (await partitionLeader(admin, topic, 1)) === victim,
    60_000,
  );
  steps.mark('leaders as assigned');
  return { topic, victim, answering, tid, service: nodeServices(stack).get(victim)! };
}

/**
 * Sends 10 records to each partition in one send while the victim is frozen; once the victim's
 * partition moved to the broker that already answered, SIGKILL of the victim ends its request.
 */
async function sendThroughLeaderKill(txn: PreparedTransaction, l: Awaited<ReturnType<typeof layout>>, steps: Steps) {
  // One record to each partition first: both partitions join the transaction while every node
  // is up (the coordinator's write needs the ISR), as an epoch's earlier requests would.
  await txn.send([{ topic: l.topic, messages: [...messages(0, 1, 'first'), ...messages(1, 1, 'first')] }]);
  // The leader is watched through the other two nodes only: kafkajs sends a metadata request to
  // any broker it is connected to, and one sent to the frozen node hangs for its request timeout
  // on every retry (the watch then timed out on a loaded machine).
  const others = (await admin.describeCluster()).brokers
    .filter((b) => b.nodeId !== l.victim)
    .map((b) => `${b.host}:${b.port}`);
  const watcher = new Kafka({
    ...kafkaClientConfig(settings.kafka, 'onceflow-cluster-watch'),
    brokers: others,
    requestTimeout: 5000,
    logLevel: logLevel.NOTHING,
  }).admin();
  await watcher.connect();
  const pid = await servicePid(stack, l.service);
  steps.mark('set up');
  process.kill(-pid, 'SIGSTOP');
  try {
    let settledAt = Infinity;
    const sending = txn
      .send([{ topic: l.topic, messages: [...messages(0, 10, l.tid), ...messages(1, 10, l.tid)] }])
      .then(
        (r) => ({ ok: true as const, r }),
        (e: unknown) => ({ ok: false as const, e }),
      )
      .finally(() => (settledAt = Date.now()));
    await waitFor(
      `${l.topic}[1] led by node ${l.answering}`,
      async () => (await partitionLeader(watcher, l.topic, 1)) === l.answering,
      90_000,
    );
    steps.mark('leader moved');
    // The answering broker acknowledges partition 0 once the frozen node left its ISR (same moment).
    await sleep(2000);
    const killAt = Date.now();
    await services(stack, ['kill', l.service]);
    const out = await sending;
    steps.mark('send settled');
    // The interleaving the tests name: the send still pending when the victim was killed.
    assert.ok(
      settledAt >= killAt,
      `the send settled ${killAt - settledAt} ms before the victim was killed (${out.ok ? 'acknowledged' : String(out.e)})`,
    );
    return out;
  } finally {
    await watcher.disconnect().catch(() => undefined);
    try {
      process.kill(-pid, 'SIGCONT');
    } catch {
      // killed
    }
    await services(stack, ['up', l.service]);
    steps.mark('node restarted');
    await waitFor('the cluster whole again', () => clusterWhole(admin, 3, ['__transaction_state']), 180_000);
    steps.mark('cluster whole');
  }
}

/** How long each step of a leader-kill test took, in its diagnostics (how the wait for a rebalance in layout was found). */
class Steps {
  private at = Date.now();
  private readonly done: string[] = [];
  mark(step: string): void {
    const now = Date.now();
    this.done.push(`${step} ${((now - this.at) / 1000).toFixed(1)} s`);
    this.at = now;
  }
  toString(): string {
    return this.done.join(', ');
  }
}

test(
  "kafkajs alone: a send through a leader kill is acknowledged while a partition's records never reach the log",
  { timeout: 400_000 },
  async (t) => {
    const steps = new Steps();
    const l = await layout('raw', steps);
    const txn = new PreparedTransaction(cluster, l.tid, 120_000);
    const h = await txn.begin();
    const out = await sendThroughLeaderKill(txn, l, steps);
    const inLog = await scanProducerRecords(cluster, {
      topic: l.topic,
      partition: 1,
      fromOffset: 0,
      producerId: h.producerId,
      producerEpoch: h.producerEpoch,
      expected: 11,
    });
    steps.mark('log scanned');
    t.diagnostic(`steps: ${steps}`);
    t.diagnostic(
      `send ${out.ok ? `acknowledged partitions [${out.r.map((x) => x.partition).join(', ')}]` : `failed: ${String(out.e)}`}; partition 1 holds ${inLog.found} of the 11 records this producer sent and had acknowledged`,
    );
    await endTxn(cluster, h, false);
    // The finding: acknowledged (no error) while partition 1's records are not in the log.
    assert.equal(out.ok, true, 'kafkajs resolved the send');
    assert.deepEqual(out.ok && out.r.map((x) => x.partition), [0], 'only partition 0 in the acknowledgement');
    assert.equal(inLog.found, 1, 'of partition 1, only the record of the first send is in the log');
  },
);

test(
  'onceflow prepare path: the same send fails and the attempt is redone; a whole epoch passes the log check',
  { timeout: 400_000 },
  async (t) => {
    const steps = new Steps();
    const l = await layout('counted', steps);
    const txn = new CountedTransaction(cluster, l.tid, 120_000);
    const h = await txn.begin();
    const out = await sendThroughLeaderKill(txn, l, steps);
    t.diagnostic(`steps: ${steps}`);
    t.diagnostic(out.ok ? 'send acknowledged every partition it carried' : `send failed: ${String(out.e)}`);
    // The send the raw path above resolves without partition 1 fails here, naming it, as retryable.
    assert.equal(out.ok, false, 'the counted send did not resolve');
    assert.ok(!out.ok && out.e instanceof TransientError, String(!out.ok && out.e));
    assert.match(String(out.e), /Kafka acknowledged a send without \S+\/1 \(10 records\) .*the attempt is redone/);
    // What prepare does on the failure: abort, and the retried attempt writes the epoch again.
    await endTxn(cluster, h, false);
    const again = new CountedTransaction(cluster, l.tid, 120_000);
    const h2 = await again.begin();
    await again.send([{ topic: l.topic, messages: [...messages(0, 10, 'redo'), ...messages(1, 10, 'redo')] }]);
    const check = await checkLanded(cluster, again, h2);
    assert.equal(check.partitions, 2);
    assert.equal(await endTxn(cluster, h2, true), 'ok');
  },
);

test(
  'the log check costs one DescribeProducers request per leader broker of a 500-record epoch',
  { timeout: 300_000 },
  async (t) => {
    const topic = `cluster-cost-${Date.now().toString(36)}`;
    await createTopicsReady(admin, [{ topic, numPartitions: 4, replicationFactor: 3 }]);
    const sendMs: number[] = [];
    const checkMs: number[] = [];
    let requests = 0;
    const rounds = 20;
    for (let i = 0; i < rounds; i++) {
      const txn = new CountedTransaction(cluster, `onceflow.cluster-test.cost.${i % 2}`, 60_000);
      const h = await txn.begin();
      const t0 = Date.now();
      // One epoch's output: 500 records of ~200 bytes over the 4 output partitions.
      await txn.send([
        {
          topic,
          messages: Array.from({ length: 500 }, (_, k) => ({
            key: `k${k}`,
            value: JSON.stringify({ i, k, pad: 'x'.repeat(160) }),
            partition: k % 4,
          })),
        },
      ]);
      sendMs.push(Date.now() - t0);
      const c = await checkLanded(cluster, txn, h);
      checkMs.push(c.ms);
      requests += c.requests;
      assert.equal(c.partitions, 4);
      assert.equal(await endTxn(cluster, h, true), 'ok');
    }
    // Leaders do not move here (no faults): read once the topic is known everywhere.
    const leaders = new Set(await Promise.all([0, 1, 2, 3].map((p) => partitionLeader(admin, topic, p))));
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const p = (xs: number[], q: number) =>
      [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
    t.diagnostic(
      `${rounds} epochs of 500 records on 4 partitions led by ${leaders.size} brokers: send mean ${mean(sendMs).toFixed(1)} ms; check mean ${mean(checkMs).toFixed(1)} ms, p50 ${p(checkMs, 0.5)} ms, max ${Math.max(...checkMs)} ms; ${requests / rounds} requests per epoch`,
    );
    assert.equal(requests, rounds * leaders.size, 'one request per leader broker per epoch');
  },
);

/**
 * Cluster campaign run 8 (seed 20261202): one epoch's 15 outputs were written twice in ONE
 * transaction — two produce requests of the same producer id and epoch to the same leader, 16 ms
 * apart, sequences 0..14 then 15..29 (docs/reliability-runs.md). kafkajs's sendMessages keys its
 * per-broker requests by Broker object while each request carries every partition of that NODE:
 * a node whose object the client's broker pool replaced during the send (removeBroker after a
 * connection closed, then a metadata refresh — the client is shared by every activity of a
 * worker) gets two requests with the same records. Here the replacement is forced between the
 * send's two lookups of the node (one per topic, both led by it).
 */
async function sendWithBrokerReplaced(
  txn: PreparedTransaction,
  node: number,
  topicMessages: { topic: string; messages: ReturnType<typeof messages> }[],
) {
  const raw = cluster.raw;
  const findBroker = raw.findBroker;
  let lookups = 0;
  raw.findBroker = async (a: { nodeId: number | string }) => {
    const b = await findBroker.call(raw, a);
    if (String(a.nodeId) === String(node) && ++lookups === 1) {
      raw.brokerPool.removeBroker({ host: b.connectionPool.host, port: b.connectionPool.port });
      await raw.refreshMetadata();
    }
    return b;
  };
  try {
    return await txn.send(topicMessages).then(
      (r) => ({ ok: true as const, r }),
      (e: unknown) => ({ ok: false as const, e }),
    );
  } finally {
    raw.findBroker = findBroker;
  }
}

test(
  "run 8: a send that writes its records twice in one transaction — kafkajs commits duplicates, onceflow's checks refuse the epoch (exact count)",
  { timeout: 300_000 },
  async (t) => {
    const ids = (await admin.describeCluster()).brokers.map((b) => b.nodeId).sort();
    const [node, b2, b3] = [ids[0]!, ids[1]!, ids[2]!];
    const tag = Date.now().toString(36);
    const topics = [`cluster-dup-a-${tag}`, `cluster-dup-b-${tag}`];
    await createTopicsReady(
      admin,
      topics.map((topic) => ({ topic, replicaAssignment: [{ partition: 0, replicas: [node, b2, b3] }] })),
    );
    await waitFor(
      'both topics led by one node',
      async () =>
        (await partitionLeader(admin, topics[0]!, 0)) === node &&
        (await partitionLeader(admin, topics[1]!, 0)) === node,
      60_000,
    );
    const batch = (id: string) => topics.map((topic) => ({ topic, messages: messages(0, 15, `${id}-${topic}`) }));

    // kafkajs alone: the send resolves, the acknowledgement names each partition twice, and the
    // committed transaction holds 30 records of each partition for 15 sent.
    const plain = new PreparedTransaction(cluster, `onceflow.cluster-test.dup.${tag}.0`, 60_000);
    const h = await plain.begin();
    const out = await sendWithBrokerReplaced(plain, node, batch('plain'));
    assert.equal(out.ok, true, out.ok ? '' : String(out.e));
    t.diagnostic(
      `plain send acknowledged ${out.ok ? out.r.map((x) => `${x.topic.slice(0, 13)}[${x.partition}]@${x.baseOffset}`).join(', ') : '-'}`,
    );
    assert.equal(await endTxn(cluster, h, true), 'ok');
    for (const topic of topics) {
      const c = await scanProducerRecords(cluster, {
        topic,
        partition: 0,
        fromOffset: 0,
        producerId: h.producerId,
        producerEpoch: h.producerEpoch,
        expected: 1000,
        settleMs: 0,
      });
      assert.equal(c.found, 30, `${topic}: the committed transaction holds every record twice`);
    }

    // onceflow's CountedTransaction: the same send fails (acknowledged twice / sequence 30 for 15 sent).
    const counted = new CountedTransaction(cluster, `onceflow.cluster-test.dup.${tag}.1`, 60_000);
    const h1 = await counted.begin();
    const refused = await sendWithBrokerReplaced(counted, node, batch('counted'));
    t.diagnostic(refused.ok ? 'counted send resolved' : `counted send refused: ${String(refused.e)}`);
    assert.equal(refused.ok, false);
    assert.ok(
      !refused.ok && refused.e instanceof TransientError && /more records than were sent/.test(refused.e.message),
      String(!refused.ok && refused.e),
    );
    assert.equal(await endTxn(cluster, h1, false), 'ok');

    // checkLanded alone is exact: a surplus in the log (records of this transaction written
    // without the counted send seeing them) fails it. The check before this fix asked only
    // whether the log held fewer records than were sent (its count stopped at the expected number).
    const extra = new CountedTransaction(cluster, `onceflow.cluster-test.dup.${tag}.2`, 60_000);
    const h2 = await extra.begin();
    await extra.send([{ topic: topics[0]!, messages: messages(0, 15, 'extra') }]);
    await PreparedTransaction.prototype.send.call(extra, [{ topic: topics[0]!, messages: messages(0, 15, 'extra') }]);
    const old = await scanProducerRecords(cluster, {
      topic: topics[0]!,
      partition: 0,
      fromOffset: await earliestOffset(cluster, topics[0]!, 0),
      producerId: h2.producerId,
      producerEpoch: h2.producerEpoch,
      expected: 15,
    });
    assert.ok(!(old.found < 15), 'the former check (short only) passes this transaction');
    await assert.rejects(
      checkLanded(cluster, extra, h2),
      (e: unknown) =>
        e instanceof TransientError && /more records of this transaction than were sent/.test((e as Error).message),
    );
    assert.equal(await endTxn(cluster, h2, false), 'ok');

    // And a whole epoch still passes.
    const fine = new CountedTransaction(cluster, `onceflow.cluster-test.dup.${tag}.3`, 60_000);
    const h3 = await fine.begin();
    await fine.send(batch('fine'));
    assert.equal((await checkLanded(cluster, fine, h3)).partitions, 2);
    assert.equal(await endTxn(cluster, h3, true), 'ok');
  },
);

/**
 * Setup's topic race (no broker needed: a fake admin whose answering node lags): topics that
 * exist are waited for, not refused with a ConfigError; a source topic counts as missing only
 * if it stays unlisted.
 */
test('setup on a cluster: a node that has not learnt a topic yet delays setup instead of failing it', async () => {
  const lagging = (lagCalls: number, topics: Record<string, number>) => {
    let calls = 0;
    return {
      listTopics: async () => (++calls <= lagCalls ? [] : Object.keys(topics)),
      fetchTopicMetadata: async ({ topics: ts }: { topics: string[] }) => ({
        topics: ts.map((name) => ({
          name,
          partitions: Array.from({ length: topics[name] ?? 0 }, (_, i) => ({ partitionId: i, leader: 1 })),
        })),
      }),
    } as unknown as Admin;
  };
  const counts = await partitionCountsOfKnown(lagging(3, { out: 4, dlq: 4, progress: 4 }), ['out', 'dlq', 'progress']);
  assert.deepEqual(
    [...counts.entries()],
    [
      ['out', 4],
      ['dlq', 4],
      ['progress', 4],
    ],
  );
  const seen = await missingTopics(lagging(3, { src: 4 }), ['src']);
  assert.deepEqual(seen.missing, []);
  // Still invisible after the bound: retryable, never a ConfigError.
  await assert.rejects(
    partitionCountsOfKnown(lagging(1e9, {}), ['out'], ['out'], 600),
    (e: unknown) => e instanceof TransientError,
  );
  // A source topic that really does not exist is still reported missing (setup's ConfigError).
  assert.deepEqual((await missingTopics(lagging(0, { other: 1 }), ['src'], 500)).missing, ['src']);
});
