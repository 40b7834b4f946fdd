/**
 * The campaign's input: a live stream produced at a steady rate while the faults run (so there
 * is always an epoch in flight to hit), then the rest at full speed. Produced straight to the
 * broker, not through a worker's proxy. A send that fails (the broker is restarting) is
 * retried; the verification compares against the source as it was committed, so an input
 * record the idempotent producer could not de-duplicate is still checked like any other.
 */
import { Kafka, logLevel, type Producer } from 'kafkajs';
import type { CompareEvent } from '../../examples/flink-compare/transform';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class InputFeeder {
  produced = 0;
  sendErrors = 0;
  private mode: 'steady' | 'finish' | 'stop' = 'steady';
  private producer: Producer | undefined;
  private loop: Promise<void> | undefined;
  private readonly kafka: Kafka;

  constructor(
    brokers: string[],
    private readonly topic: string,
    private readonly partitions: number,
    private readonly values: (CompareEvent | string)[],
    private readonly perSecond: number,
    private readonly minimum: number,
    private readonly log: (s: string) => void,
  ) {
    this.kafka = new Kafka({ brokers, clientId: 'onceflow-chaos-input', logLevel: logLevel.NOTHING, retry: { retries: 3 } });
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
