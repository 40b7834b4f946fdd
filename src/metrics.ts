/**
 * The worker's Prometheus endpoint (prom-client, text exposition format 0.0.4), fed by the
 * activities' observed events: records and epochs prepared, commits, epoch phase durations, lag, seconds
 * since the last commit (computed at scrape time), retries, redos, splits, dead letters, halts,
 * rolled-back leftovers. Each WorkerMetrics has its own registry, so two workers in one process
 * do not share (or collide on) series.
 */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ObservedEvent } from './activities';

const PARTITION = ['pipeline', 'partition'] as const;

export class WorkerMetrics {
  readonly registry = new Registry();
  private readonly counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new Counter<L>({ name, help, labelNames, registers: [this.registry] });

  readonly records = this.counter(
    'onceflow_records_total',
    'Source records prepared in epochs (rate() gives records/s)',
    PARTITION,
  );
  readonly epochs = this.counter('onceflow_epochs_prepared_total', 'Epochs prepared', PARTITION);
  readonly commits = this.counter('onceflow_commits_total', 'Commits by side (kafka, mysql)', [...PARTITION, 'side']);
  readonly phase = new Histogram({
    name: 'onceflow_epoch_phase_seconds',
    help: 'Duration of epoch phases on this worker',
    labelNames: ['pipeline', 'phase'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly lag = new Gauge({
    name: 'onceflow_lag_records',
    help: 'Source records not yet in an epoch, per partition (as of the last prepare)',
    labelNames: PARTITION,
    registers: [this.registry],
  });
  /** Seconds since this worker last saw an epoch of the partition commit (see secondsSinceLastCommit). */
  readonly sinceCommit = this.secondsSinceLastCommit();
  readonly retries = this.counter('onceflow_retries_total', 'Activity attempts after the first', [
    ...PARTITION,
    'activity',
  ]);
  readonly redos = this.counter(
    'onceflow_redos_total',
    'Epochs redone (Kafka side aborted by the broker, or MySQL branch vanished)',
    [...PARTITION, 'side'],
  );
  readonly splits = this.counter(
    'onceflow_kafka_splits_total',
    'Epochs whose Kafka transaction came out committed on some partitions and aborted on others (found after an ambiguous EndTxn; the aborted parts are redone)',
    PARTITION,
  );
  readonly deadLetters = this.counter(
    'onceflow_dead_letters_total',
    'Records sent to the dead-letter topic',
    PARTITION,
  );
  readonly halts = this.counter(
    'onceflow_halts_total',
    'Epochs refused and their partition stopped: dead letters over the budget, or a row for an undeclared table (cause label)',
    [...PARTITION, 'cause'],
  );
  readonly rolledBack = this.counter(
    'onceflow_rolled_back_branches_total',
    'Leftover XA branches rolled back by retried prepares',
    PARTITION,
  );
  /** Per partition: the epoch of the last commit seen, and when (`now()`) it was first seen. */
  private readonly lastCommit = new Map<
    string,
    { labels: { pipeline: string; partition: number }; epoch: number; at: number }
  >();

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * Per partition, from the last epoch this worker saw commit (its first side's 'committed'
   * event; a retried commit reporting the same epoch again does not reset it), computed at
   * scrape time. Each worker reports its own view: take the minimum across workers. A partition
   * appears once this worker has seen one of its epochs commit, and the value also grows while
   * the pipeline is idle, paused or stopped: alert on it together with lag.
   */
  private secondsSinceLastCommit() {
    const values = () => {
      const t = this.now();
      return [...this.lastCommit.values()].map(({ labels, at }) => [labels, Math.max(0, (t - at) / 1000)] as const);
    };
    return new Gauge({
      name: 'onceflow_seconds_since_last_commit',
      help: 'Seconds since this worker last saw an epoch of the partition commit (take the min across workers)',
      labelNames: PARTITION,
      registers: [this.registry],
      collect() {
        for (const [labels, v] of values()) this.set(labels, v);
      },
    });
  }

  observe = (e: ObservedEvent): void => {
    const l = { pipeline: e.pipeline, partition: e.partition };
    switch (e.kind) {
      case 'prepared':
        this.records.inc(l, e.records);
        this.epochs.inc(l);
        this.deadLetters.inc(l, e.deadLetters);
        this.lag.set(l, e.lag);
        this.phase.observe({ pipeline: e.pipeline, phase: 'prepare' }, e.ms / 1000);
        break;
      case 'committed': {
        this.commits.inc({ ...l, side: e.side });
        const k = JSON.stringify([e.pipeline, e.partition]);
        if (this.lastCommit.get(k)?.epoch !== e.epoch)
          this.lastCommit.set(k, { labels: l, epoch: e.epoch, at: this.now() });
        this.phase.observe({ pipeline: e.pipeline, phase: `commit_${e.side}` }, e.ms / 1000);
        break;
      }
      case 'redo':
        this.redos.inc({ ...l, side: e.side });
        break;
      case 'split':
        this.splits.inc(l);
        break;
      case 'retry':
        this.retries.inc({ ...l, activity: e.activity });
        break;
      case 'halted':
        this.halts.inc({ ...l, cause: e.cause });
        break;
      case 'rolled-back':
        this.rolledBack.inc(l);
        break;
    }
  };

  /** The exposition text (what /metrics serves). */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}

export function serveMetrics(metrics: WorkerMetrics, port: number, host = '127.0.0.1'): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end('see /metrics\n');
      return;
    }
    metrics.text().then(
      (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      (e: unknown) => res.writeHead(500).end(`${e instanceof Error ? e.message : String(e)}\n`),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
