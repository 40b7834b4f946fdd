/**
 * The worker's Prometheus endpoint (text exposition format 0.0.4), fed by the activities'
 * observed events: records and epochs committed, epoch phase durations, lag, seconds since the
 * last commit (computed at scrape time), retries, redos, dead letters, halts, rolled-back leftovers.
 * No client library needed for this little.
 */
import { createServer, type Server } from 'node:http';
import type { ObservedEvent } from './activities';

type Labels = Record<string, string | number>;
const key = (l: Labels) => JSON.stringify(Object.entries(l).sort());
const fmt = (l: Labels) => {
  const e = Object.entries(l);
  return e.length ? `{${e.map(([k, v]) => `${k}="${String(v).replace(/["\\\n]/g, '_')}"`).join(',')}}` : '';
};

abstract class Metric {
  constructor(readonly name: string, readonly help: string, readonly type: string) {}
  abstract lines(): string[];
  header(): string[] {
    return [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} ${this.type}`];
  }
}

export class Counter extends Metric {
  private readonly values = new Map<string, { labels: Labels; v: number }>();
  constructor(name: string, help: string) {
    super(name, help, 'counter');
  }
  inc(labels: Labels, by = 1): void {
    const k = key(labels);
    const cur = this.values.get(k) ?? { labels, v: 0 };
    cur.v += by;
    this.values.set(k, cur);
  }
  get(labels: Labels): number {
    return this.values.get(key(labels))?.v ?? 0;
  }
  lines(): string[] {
    return [...this.values.values()].map(({ labels, v }) => `${this.name}${fmt(labels)} ${v}`);
  }
}

export class Gauge extends Metric {
  private readonly values = new Map<string, { labels: Labels; v: number }>();
  constructor(name: string, help: string) {
    super(name, help, 'gauge');
  }
  set(labels: Labels, v: number): void {
    this.values.set(key(labels), { labels, v });
  }
  lines(): string[] {
    return [...this.values.values()].map(({ labels, v }) => `${this.name}${fmt(labels)} ${v}`);
  }
}

/**
 * Seconds since a mark, computed at scrape time. A mark counts only when its `version` differs
 * from the series' last one, so repeating a mark (a retried activity reporting the same epoch
 * again) does not reset the clock.
 */
export class SecondsSince extends Metric {
  private readonly values = new Map<string, { labels: Labels; version: number; at: number }>();
  constructor(name: string, help: string, private readonly now: () => number = Date.now) {
    super(name, help, 'gauge');
  }
  mark(labels: Labels, version: number): void {
    const k = key(labels);
    if (this.values.get(k)?.version === version) return;
    this.values.set(k, { labels, version, at: this.now() });
  }
  lines(): string[] {
    const now = this.now();
    return [...this.values.values()].map(({ labels, at }) => `${this.name}${fmt(labels)} ${Math.max(0, (now - at) / 1000).toFixed(3)}`);
  }
}

export class Histogram extends Metric {
  private readonly values = new Map<string, { labels: Labels; buckets: number[]; sum: number; count: number }>();
  constructor(name: string, help: string, readonly bounds: number[]) {
    super(name, help, 'histogram');
  }
  observe(labels: Labels, v: number): void {
    const k = key(labels);
    const cur = this.values.get(k) ?? { labels, buckets: this.bounds.map(() => 0), sum: 0, count: 0 };
    this.bounds.forEach((b, i) => {
      if (v <= b) cur.buckets[i]!++;
    });
    cur.sum += v;
    cur.count++;
    this.values.set(k, cur);
  }
  lines(): string[] {
    const out: string[] = [];
    for (const { labels, buckets, sum, count } of this.values.values()) {
      this.bounds.forEach((b, i) => out.push(`${this.name}_bucket${fmt({ ...labels, le: b })} ${buckets[i]}`));
      out.push(`${this.name}_bucket${fmt({ ...labels, le: '+Inf' })} ${count}`);
      out.push(`${this.name}_sum${fmt(labels)} ${sum}`);
      out.push(`${this.name}_count${fmt(labels)} ${count}`);
    }
    return out;
  }
}

export class WorkerMetrics {
  readonly records = new Counter('onceflow_records_total', 'Source records prepared in epochs (rate() gives records/s)');
  readonly epochs = new Counter('onceflow_epochs_prepared_total', 'Epochs prepared');
  readonly commits = new Counter('onceflow_commits_total', 'Commits by side (kafka, mysql)');
  readonly phase = new Histogram('onceflow_epoch_phase_seconds', 'Duration of epoch phases on this worker', [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);
  readonly lag = new Gauge('onceflow_lag_records', 'Source records not yet in an epoch, per partition (as of the last prepare)');
  readonly retries = new Counter('onceflow_retries_total', 'Activity attempts after the first');
  readonly redos = new Counter('onceflow_redos_total', 'Epochs redone (Kafka side aborted by the broker, or MySQL branch vanished)');
  readonly splits = new Counter('onceflow_kafka_splits_total', 'Epochs whose Kafka transaction came out committed on some partitions and aborted on others (found after an ambiguous EndTxn; the aborted parts are redone)');
  readonly deadLetters = new Counter('onceflow_dead_letters_total', 'Records sent to the dead-letter topic');
  readonly halts = new Counter('onceflow_halts_total', 'Epochs refused and their partition stopped: dead letters over the budget, or a row for an undeclared table (cause label)');
  readonly rolledBack = new Counter('onceflow_rolled_back_branches_total', 'Leftover XA branches rolled back by retried prepares');
  /**
   * Per partition, from the last epoch this worker saw commit (its first side's 'committed'
   * event; a retried commit reporting the same epoch again does not count). Each worker reports
   * its own view: take the minimum across workers. A partition appears once this worker has seen
   * one of its epochs commit, and the value also grows while the pipeline is idle, paused or
   * stopped: alert on it together with lag.
   */
  readonly sinceCommit: SecondsSince;
  private readonly all: Metric[];

  constructor(now: () => number = Date.now) {
    this.sinceCommit = new SecondsSince('onceflow_seconds_since_last_commit', 'Seconds since this worker last saw an epoch of the partition commit (take the min across workers)', now);
    this.all = [this.records, this.epochs, this.commits, this.phase, this.lag, this.sinceCommit, this.retries, this.redos, this.splits, this.deadLetters, this.halts, this.rolledBack];
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
      case 'committed':
        this.commits.inc({ ...l, side: e.side });
        this.sinceCommit.mark(l, e.epoch);
        this.phase.observe({ pipeline: e.pipeline, phase: `commit_${e.side}` }, e.ms / 1000);
        break;
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

  text(): string {
    return this.all.flatMap((m) => [...m.header(), ...m.lines()]).join('\n') + '\n';
  }
}

export function serveMetrics(metrics: WorkerMetrics, port: number, host = '127.0.0.1'): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end('see /metrics\n');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(metrics.text());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
