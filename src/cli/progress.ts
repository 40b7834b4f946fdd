/**
 * What a person running `onceflow worker` or `onceflow run` sees: a progress line every few
 * seconds and one line per expected failure (a retried activity, a redo), while the full worker
 * log — with stack traces — goes to a file (or to stderr with --verbose).
 */
import { appendFileSync } from 'node:fs';
import { DefaultLogger, Runtime, type LogEntry } from '@temporalio/worker';
import type { ObservedEvent } from '../activities/observe';
import { formatLogLine, log, setLogSink, type LogLine } from '../log';

export interface CliLogOptions {
  logFile?: string;
  verbose: boolean;
  echo: (line: string) => void;
}

/**
 * Points onceflow's log (src/log.ts) at this command's terminal and log file. The file — or,
 * with verbose, the terminal — gets every line in full; otherwise the terminal gets onceflow's
 * own lines and one line per Temporal warning or error (summarize). The Kafka client's lines go
 * to the file only: a problem it has reaches the terminal as onceflow's own clear message (a
 * wrong broker: "cannot reach Kafka at …"), or as a failed activity attempt.
 */
export function installCliLog({ logFile, verbose, echo }: CliLogOptions): void {
  setLogSink((l: LogLine) => {
    if (logFile) appendFileSync(logFile, `${formatLogLine(l)}\n`);
    if (verbose) echo(l.source === 'onceflow' ? l.message : formatLogLine(l));
    else if (l.source === 'onceflow') echo(l.message);
    else if (l.source === 'temporal' && (l.level === 'WARN' || l.level === 'ERROR')) echo(summarize(l));
  });
}

/** installCliLog, and the Temporal runtime's log (the worker's, from INFO) into onceflow's log. */
export function installWorkerLog(opts: CliLogOptions): void {
  installCliLog(opts);
  Runtime.install({ logger: new DefaultLogger('INFO', (e: LogEntry) => log(e.level, 'temporal', e.message, e.meta)) });
}

/** One line for a worker warning: the activity, its attempt and the first line of its error. */
export function summarize(e: { level: string; message: string; meta?: Record<string, unknown> }): string {
  const m = (e.meta ?? {}) as { activityType?: string; attempt?: number; workflowId?: string; error?: unknown };
  // An activity's own log line (no error attached, e.g. a halted pipeline's): its message is the news.
  const err =
    m.error instanceof Error
      ? m.error.message
      : m.error === undefined
        ? m.activityType
          ? e.message
          : ''
        : String((m.error as { message?: unknown }).message ?? m.error);
  const where = m.activityType
    ? `${m.activityType} attempt ${m.attempt ?? '?'}${m.workflowId ? ` of ${m.workflowId}` : ''}`
    : e.message;
  return `  ${e.level === 'ERROR' ? 'error' : 'attempt failed'}: ${where}${err ? ` — ${err.split('\n')[0]}` : ''}`;
}

/** Counts what the activities report and prints a progress line at most every `everyMs`. */
export class ProgressView {
  private epochs = 0;
  private records = 0;
  private deadLetters = 0;
  private retries = 0;
  private redos = 0;
  private readonly lag = new Map<string, number>();
  /** the newest epoch counted per pipeline/partition: a commit observed again (a retried activity) is not a new epoch */
  private readonly counted = new Map<string, number>();
  /** prepared, not yet committed: records and dead letters by pipeline/partition/epoch */
  private readonly pending = new Map<string, { records: number; deadLetters: number }>();
  private last = { at: Date.now(), records: 0 };
  private timer?: NodeJS.Timeout;

  constructor(private readonly print: (line: string) => void) {}

  observe = (e: ObservedEvent): void => {
    if (e.kind === 'prepared') {
      this.lag.set(`${e.pipeline}/${e.partition}`, e.lag);
      this.pending.set(`${e.pipeline}/${e.partition}/${e.epoch}`, { records: e.records, deadLetters: e.deadLetters });
    } else if (e.kind === 'committed' && e.side === 'mysql') {
      // Counted at the commit: a prepared epoch may still be rolled back and prepared again.
      const key = `${e.pipeline}/${e.partition}/${e.epoch}`;
      const p = this.pending.get(key);
      this.pending.delete(key);
      if ((this.counted.get(`${e.pipeline}/${e.partition}`) ?? -1) >= e.epoch) return;
      this.counted.set(`${e.pipeline}/${e.partition}`, e.epoch);
      this.epochs++;
      this.records += p?.records ?? 0;
      this.deadLetters += p?.deadLetters ?? 0;
    } else if (e.kind === 'retry') this.retries++;
    else if (e.kind === 'redo') this.redos++;
  };

  line(now = Date.now()): string {
    const rate = ((this.records - this.last.records) * 1000) / Math.max(1, now - this.last.at);
    this.last = { at: now, records: this.records };
    const lag = [...this.lag.values()].reduce((a, b) => a + b, 0);
    const n = (x: number) => x.toLocaleString('en-US');
    return `${new Date(now).toISOString().slice(11, 19)}  epochs ${n(this.epochs)}  records ${n(this.records)} (${n(Math.round(rate))}/s)  lag ${n(lag)}  dead letters ${n(this.deadLetters)}  retries ${n(this.retries)}  redos ${n(this.redos)}`;
  }

  start(everyMs = 5000): this {
    this.timer = setInterval(() => this.print(this.line()), everyMs);
    this.timer.unref();
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
