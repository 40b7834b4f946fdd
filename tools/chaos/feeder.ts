/**
 * The campaign's input: a live stream produced at a steady rate while the faults run (so there
 * is always an epoch in flight to hit), then the rest at full speed. Produced straight to the
 * broker, not through a worker's proxy. A send that fails (the broker is restarting) is
 * retried; the verification compares against the source as it was committed, so an input
 * record the idempotent producer could not de-duplicate is still checked like any other.
 *
 * Acknowledgements are not trusted: `landed()` reads the source topic back and counts what is
 * really there, per partition, next to what kafkajs acknowledged. kafkajs 2.2.4 can resolve a
 * send whose partition moved to a broker that had already answered without sending it at all
 * (src/kafka/landed.ts explains the path); on a cluster this loses acknowledged input records.
 * The verdict uses what landed; the difference is reported as a harness/kafkajs finding.
 */
import { Kafka, logLevel, type Producer } from 'kafkajs';
import type { KafkaSettings } from '../../src/config';
import { kafkaClientConfig } from '../../src/kafka/client-config';
import { ISOLATION, type KafkaCluster } from '../../src/kafka/internals';
import { readAll } from '../../src/verify';
import type { CompareEvent } from '../../examples/flink-compare/transform';

/** Input acknowledged by the producer against input found in the source topic, per partition. */
export interface LandedInput {
  partitions: { partition: number; acked: number; inLog: number; ackedMissing: number; duplicates: number }[];
  acked: number;
  inLog: number;
  /** Acknowledged records not in the log (the kafkajs loss). */
  ackedMissing: number;
  /** Extra copies in the log (a failed send retried by a new producer). */
  duplicates: number;
  /** First few acknowledged-but-missing value indexes, with the partition. */
  examples: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class InputFeeder {
  produced = 0;
  sendErrors = 0;
  private mode: 'steady' | 'finish' | 'stop' = 'steady';
  private producer: Producer | undefined;
  private loop: Promise<void> | undefined;
  private readonly kafka: Kafka;

  constructor(
    kafka: KafkaSettings,
    private readonly topic: string,
    private readonly partitions: number,
    private readonly values: (CompareEvent | string)[],
    private readonly perSecond: number,
    private readonly minimum: number,
    private readonly log: (s: string) => void,
  ) {
    this.kafka = new Kafka({
      ...kafkaClientConfig(kafka, 'onceflow-chaos-input'),
      logLevel: logLevel.NOTHING,
      retry: { retries: 3 },
    });
  }

  /**
   * Reads the source topic back (read_uncommitted: the input is not transactional) and compares
   * it, value by value, with what the producer acknowledged: values [0, produced).
   */
  async landed(cluster: KafkaCluster): Promise<LandedInput> {
    const r: LandedInput = { partitions: [], acked: 0, inLog: 0, ackedMissing: 0, duplicates: 0, examples: [] };
    const indexOf = new Map<string, number>();
    this.values.forEach((v, i) => indexOf.set(typeof v === 'string' ? `poison-${i}` : v.id, i));
    for (let p = 0; p < this.partitions; p++) {
      const seen = new Map<number, number>();
      let inLog = 0;
      for (const rec of await readAll(cluster, this.topic, p, ISOLATION.READ_UNCOMMITTED)) {
        inLog++;
        const i = indexOf.get(rec.key?.toString('utf8') ?? '');
        if (i !== undefined) seen.set(i, (seen.get(i) ?? 0) + 1);
      }
      let acked = 0;
      let missing = 0;
      for (let i = p; i < this.produced; i += this.partitions) {
        acked++;
        if (!seen.has(i)) {
          missing++;
          if (r.examples.length < 10) r.examples.push(`p${p}:#${i}`);
        }
      }
      const duplicates = [...seen.values()].reduce((a, c) => a + c - 1, 0);
      r.partitions.push({ partition: p, acked, inLog, ackedMissing: missing, duplicates });
      r.acked += acked;
      r.inLog += inLog;
      r.ackedMissing += missing;
      r.duplicates += duplicates;
    }
    return r;
  }

  start(): void {
    this.loop = this.run();
  }

  /** Produces what is missing up to the minimum at full speed, then stops; resolves when done. */
  async finish(): Promise<void> {
    this.mode = 'finish';
    await this.loop;
  }

  async stop(): Promise<void> {
    this.mode = 'stop';
    await this.loop;
  }

  private async run(): Promise<void> {
    while (this.mode !== 'stop') {
      const tick = Date.now();
      if (this.mode === 'finish' && this.produced >= this.minimum) break;
      const n = this.mode === 'steady' ? this.perSecond : Math.min(2000, this.minimum - this.produced);
      if (this.produced + n > this.values.length) {
        this.log(`input: all ${this.values.length} prepared values produced; not producing more`);
        if (this.mode === 'finish') break;
        await sleep(1000);
        continue;
      }
      await this.send(this.produced, n);
      if (this.mode === 'steady') await sleep(Math.max(0, 1000 - (Date.now() - tick)));
    }
    await this.producer?.disconnect().catch(() => undefined);
  }

  private async send(from: number, n: number): Promise<void> {
    const slice = this.values.slice(from, from + n);
    for (;;) {
      if (this.mode === 'stop') return;
      try {
        if (!this.producer) {
          const p = this.kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
          await p.connect();
          this.producer = p;
        }
        await this.producer.send({
          topic: this.topic,
          messages: slice.map((v, k) => ({
            key: typeof v === 'string' ? `poison-${from + k}` : v.id,
            value: typeof v === 'string' ? v : JSON.stringify(v),
            partition: (from + k) % this.partitions,
          })),
        });
        this.produced = from + n;
        return;
      } catch {
        // Broker restarting: drop the producer and send the same batch again.
        this.sendErrors++;
        const p = this.producer;
        this.producer = undefined;
        await p?.disconnect().catch(() => undefined);
        await sleep(1000);
      }
    }
  }
}
