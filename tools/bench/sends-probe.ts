/**
 * What one epoch's sends cost, two changes side by side in one process, on records shaped like
 * the bench's distinct-key outputs (a key per record, a ~200-byte JSON value) to 2 and 32 sink
 * partitions:
 *  - encoding: the CPU of encoding the epoch's Produce requests, kafkajs's encoder
 *    (protocol/requests/produce/v3/request.js) against ours (src/kafka/internals/produce-request.ts),
 *    the requests cut as sendRecords cuts them. Needs no service.
 *  - cuts (with --kafka): the epoch sent in one real transaction (our encoder), cut at 512 KiB per
 *    request as until 2026-12-07 against REQUEST_LIMITS (512 KiB per partition): wall time and
 *    CPU. Needs the Kafka of the services env (`npm run services -- up`); makes its own topics.
 *
 *   npx tsx tools/bench/sends-probe.ts [--kafka] [records per epoch, 50000] [rounds, 5]
 */
/* eslint-disable @typescript-eslint/no-var-requires */
import { Kafka, logLevel } from 'kafkajs';
import { REQUEST_LIMITS, nextRequest, type RequestLimits } from '../../src/activities/kafka-side';
import type { KafkaMessage } from '../../src/activities/apply';
import { loadSettings } from '../../src/config';
import { kafkaClientConfig } from '../../src/kafka/client-config';
import { connectCluster, endTxn, PreparedTransaction } from '../../src/kafka/internals';
import { groupMessagesLinear } from '../../src/kafka/internals/message-producer';
import { encodeProduce, type ProduceArgs } from '../../src/kafka/internals/produce-request';
import { createTopicsReady } from '../../src/kafka/topics';

const kafkajsV3 = require('kafkajs/src/protocol/requests/produce/v3/request');

const args = process.argv.slice(2);
const withKafka = args.includes('--kafka');
const [RECORDS = 50_000, ROUNDS = 5] = args.filter((a) => !a.startsWith('--')).map(Number);
const PARTITIONS = [2, 32];
const OLD_CUT: RequestLimits = { partitionBytes: Infinity, requestBytes: 512 * 1024 };

/** One epoch's outputs to `partitions` partitions. */
function epoch(partitions: number): { topic: string; msg: KafkaMessage }[] {
  return Array.from({ length: RECORDS }, (_, i) => ({
    topic: 'out',
    msg: {
      key: `order-${1_000_000 + i}`,
      value: JSON.stringify({ id: i, customer: `c-${i}`, amount: (i % 9973) / 100, note: 'x'.repeat(120) }),
      partition: i % partitions,
    },
  }));
}

/** The epoch's requests as `limits` cut them, each as kafkajs hands a Produce request to a broker. */
function requests(all: { topic: string; msg: KafkaMessage }[], limits: RequestLimits): ProduceArgs[] {
  const out: ProduceArgs[] = [];
  for (let i = 0; i < all.length;) {
    const { topics, next } = nextRequest(all, i, limits);
    i = next;
    out.push({
      transactionalId: 'onceflow-sends-probe-0',
      acks: -1,
      timeout: 30000,
      producerId: '4242',
      producerEpoch: 3,
      // Grouped by partition as our transactions' message producer groups them.
      topicData: [...topics].map(([topic, messages]) => ({
        topic,
        partitions: Object.entries(
          groupMessagesLinear({
            topic,
            partitionMetadata: [{}],
            messages,
            partitioner: ({ message }) => message.partition,
          }),
        ).map(([partition, ms]) => ({ partition: Number(partition), messages: ms })),
      })),
    });
  }
  return out;
}

const cpu = () => {
  const c = process.cpuUsage();
  return (c.user + c.system) / 1000;
};

/** Runs each arm ROUNDS times, alternating which goes first (the first round is warm-up); the means. */
async function sideBySide<A extends string>(
  arms: Record<A, () => Promise<void>>,
): Promise<Record<A, { ms: number; cpuMs: number }>> {
  const names = Object.keys(arms) as A[];
  const sums = Object.fromEntries(names.map((n) => [n, { ms: 0, cpuMs: 0 }])) as Record<
    A,
    { ms: number; cpuMs: number }
  >;
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of round % 2 ? [...names].reverse() : names) {
      const [t0, c0] = [performance.now(), cpu()];
      await arms[name]();
      if (round === 0) continue;
      sums[name].ms += (performance.now() - t0) / (ROUNDS - 1);
      sums[name].cpuMs += (cpu() - c0) / (ROUNDS - 1);
    }
  }
  return sums;
}

const perRecord = (ms: number) => ((1000 * ms) / RECORDS).toFixed(2);

async function encoding(): Promise<void> {
  console.log(`encoding, ${RECORDS} records per epoch, ${ROUNDS} rounds (the first not counted), CPU per epoch:`);
  for (const partitions of PARTITIONS) {
    const reqs = requests(epoch(partitions), REQUEST_LIMITS);
    const r = await sideBySide({
      kafkajs: async () => {
        for (const a of reqs) await kafkajsV3(a).encode();
      },
      onceflow: async () => {
        for (const a of reqs) encodeProduce(a);
      },
    });
    console.log(
      `  ${String(partitions).padStart(2)} partitions, ${reqs.length} requests: kafkajs ${r.kafkajs.cpuMs.toFixed(1)} ms, ` +
        `onceflow ${r.onceflow.cpuMs.toFixed(1)} ms (${perRecord(r.kafkajs.cpuMs)} and ${perRecord(r.onceflow.cpuMs)} µs per record; ÷ ${(r.onceflow.cpuMs / r.kafkajs.cpuMs).toFixed(2)})`,
    );
  }
}

async function cuts(): Promise<void> {
  const settings = loadSettings();
  const kafka = new Kafka({ ...kafkaClientConfig(settings.kafka, 'onceflow-sends-probe'), logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  const cluster = await connectCluster({
    ...kafkaClientConfig(settings.kafka, 'onceflow-sends-probe-cluster'),
    logLevel: logLevel.ERROR,
  });
  const tag = `sends-probe-${Date.now()}`;
  const topics = PARTITIONS.map((p) => `${tag}-${p}`);
  try {
    await createTopicsReady(
      admin,
      PARTITIONS.map((p, k) => ({ topic: topics[k]!, numPartitions: p, replicationFactor: 1 })),
    );
    console.log(
      `cuts, one epoch of ${RECORDS} records sent in one committed transaction, ${ROUNDS} rounds (the first not counted):`,
    );
    for (const [k, partitions] of PARTITIONS.entries()) {
      const all = epoch(partitions).map(({ msg }) => ({ topic: topics[k]!, msg }));
      const send = (limits: RequestLimits, id: string) => async () => {
        const txn = new PreparedTransaction(cluster, `${tag}-${id}`, 60_000);
        await txn.begin();
        for (let i = 0; i < all.length;) {
          const { topics: t, next } = nextRequest(all, i, limits);
          i = next;
          await txn.send([...t].map(([topic, messages]) => ({ topic, messages })));
        }
        if ((await endTxn(cluster, txn.handle(), true)) !== 'ok')
          throw new Error('the probe transaction did not commit');
      };
      const r = await sideBySide({
        perRequest: send(OLD_CUT, `${partitions}-old`),
        perPartition: send(REQUEST_LIMITS, `${partitions}-new`),
      });
      const n = (l: RequestLimits) => {
        let c = 0;
        for (let i = 0; i < all.length; c++) i = nextRequest(all, i, l).next;
        return c;
      };
      console.log(
        `  ${String(partitions).padStart(2)} partitions: 512 KiB per request (${n(OLD_CUT)} requests) ${r.perRequest.ms.toFixed(0)} ms, CPU ${r.perRequest.cpuMs.toFixed(0)} ms; ` +
          `512 KiB per partition (${n(REQUEST_LIMITS)}) ${r.perPartition.ms.toFixed(0)} ms, CPU ${r.perPartition.cpuMs.toFixed(0)} ms (time ÷ ${(r.perPartition.ms / r.perRequest.ms).toFixed(2)})`,
      );
    }
  } finally {
    await admin.deleteTopics({ topics }).catch(() => undefined);
    await admin.disconnect();
    await cluster.disconnect();
  }
}

void (async () => {
  await encoding();
  if (withKafka) await cuts();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
