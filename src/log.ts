/**
 * onceflow's log: where every component's log lines go — the Temporal runtime's (workers), the
 * Kafka client's (kafkajs, through kafkaLogCreator) and the CLI's own — so that one sink decides
 * what a terminal sees (one clear line per problem) and what a log file gets (everything). The
 * CLI sets the sink (src/cli/progress.ts); a program that embeds onceflow gets warnings and
 * errors on stderr, one line each, unless it sets its own.
 */
export type LogLevel = 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';

export interface LogLine {
  at: Date;
  level: LogLevel;
  /** who logged it: the Temporal runtime, the Kafka client, or onceflow itself */
  source: 'temporal' | 'kafkajs' | 'onceflow';
  message: string;
  meta?: Record<string, unknown>;
}

export type LogSink = (line: LogLine) => void;

/** A line with its time, level, source and metadata (errors with their stacks), as a log file holds it. */
export function formatLogLine(l: LogLine): string {
  const meta =
    l.meta && Object.keys(l.meta).length
      ? ` ${JSON.stringify(l.meta, (_k, v: unknown) => (v instanceof Error ? { message: v.message, stack: v.stack } : typeof v === 'bigint' ? String(v) : v))}`
      : '';
  return `${l.at.toISOString()} [${l.level}] ${l.source}: ${l.message}${meta}`;
}

const stderrSink: LogSink = (l) => {
  if (l.level === 'WARN' || l.level === 'ERROR') process.stderr.write(`[onceflow] ${formatLogLine(l)}\n`);
};

let sink: LogSink = stderrSink;

/** Where log lines go from now on (undefined: back to warnings and errors on stderr). */
export function setLogSink(s: LogSink | undefined): void {
  sink = s ?? stderrSink;
}

export function log(level: LogLevel, source: LogLine['source'], message: string, meta?: Record<string, unknown>): void {
  sink({ at: new Date(), level, source, message, ...(meta ? { meta } : {}) });
}
