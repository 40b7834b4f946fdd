/**
 * What encoding one epoch's Produce requests costs the worker's CPU: kafkajs's encoder
 * (protocol/requests/produce/v3/request.js) against ours (src/kafka/internals/produce-request.ts),
 * side by side in one process, on records shaped like the bench's distinct-key outputs (a key per
 * record, a ~200-byte JSON value), in requests cut as an epoch's sends cut them (512 KiB). No
 * service is needed: this measures the encoding alone; `npm run bench` measures the pipelines.
 *
 *   npx tsx tools/bench/produce-encoding.ts [records per epoch, 50000] [rounds, 5]
 */
/* eslint-disable @typescript-eslint/no-var-requires */
import { encodeProduce, type ProduceArgs } from '../../src/kafka/internals/produce-request';

const kafkajsV3 = require('kafkajs/src/protocol/requests/produce/v3/request');

const RECORDS = Number(process.argv[2] ?? 50_000);
const ROUNDS = Number(process.argv[3] ?? 5);
const REQUEST_BYTES = 512 * 1024;

/** One epoch's outputs in requests of REQUEST_BYTES to `partitions` partitions, as sendRecords groups them. */
function requests(partitions: number): ProduceArgs[] {
  const out: ProduceArgs[] = [];
  let batch: { key: string; value: string; partition: number }[] = [];
  let bytes = 0;
  const flush = () => {
    const per = new Map<number, { key: string; value: string }[]>();
    for (const m of batch) (per.get(m.partition) ?? per.set(m.partition, []).get(m.partition)!).push(m);
    out.push({
      transactionalId: 'onceflow-bench-encoding-0',
      acks: -1,
      timeout: 30000,
      producerId: '4242',
      producerEpoch: 3,
      topicData: [
        { topic: 'bench-out', partitions: [...per].map(([partition, messages]) => ({ partition, messages })) },
      ],
    });
    batch = [];
    bytes = 0;
  };
  for (let i = 0; i < RECORDS; i++) {
    const key = `order-${1_000_000 + i}`;
    const value = JSON.stringify({ id: i, customer: `c-${i}`, amount: (i % 9973) / 100, note: 'x'.repeat(120) });
    batch.push({ key, value, partition: i % partitions });
    bytes += 64 + key.length + value.length;
    if (bytes >= REQUEST_BYTES) flush();
  }
  if (batch.length) flush();
  return out;
}

async function cpuMs(encode: (a: ProduceArgs) => Promise<unknown>, reqs: ProduceArgs[]): Promise<number> {
  const c0 = process.cpuUsage();
  for (const r of reqs) await encode(r);
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000;
}

async function main() {
  const encoders = {
    kafkajs: async (a: ProduceArgs) => (await kafkajsV3(a).encode()).buffer,
    onceflow: async (a: ProduceArgs) => encodeProduce(a),
  };
  console.log(`${RECORDS} records per epoch, ${ROUNDS} rounds (the first is warm-up, not counted); CPU ms per epoch:`);
  for (const partitions of [2, 32]) {
    const reqs = requests(partitions);
    const sums = { kafkajs: 0, onceflow: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      // Alternating which goes first, so neither always runs after the other's garbage.
      const order = round % 2 ? (['onceflow', 'kafkajs'] as const) : (['kafkajs', 'onceflow'] as const);
      for (const name of order) {
        const ms = await cpuMs(encoders[name], reqs);
        if (round > 0) sums[name] += ms;
      }
    }
    const n = Math.max(ROUNDS - 1, 1);
    const k = sums.kafkajs / n;
    const o = sums.onceflow / n;
    console.log(
      `${String(partitions).padStart(2)} partitions, ${reqs.length} requests: kafkajs ${k.toFixed(1)} ms, ` +
        `onceflow ${o.toFixed(1)} ms (${((1000 * k) / RECORDS).toFixed(2)} and ${((1000 * o) / RECORDS).toFixed(2)} µs per record; ÷ ${(o / k).toFixed(2)})`,
    );
  }
}

void main();
