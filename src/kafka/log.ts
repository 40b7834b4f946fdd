/**
 * kafkajs's log lines into onceflow's log (src/log.ts) instead of raw JSON on stdout: every Kafka
 * client onceflow opens takes this logCreator (kafkaClientConfig, connectCluster).
 */
import { logLevel, type logCreator } from 'kafkajs';
import { log, type LogLevel } from '../log';

const LEVEL: Record<number, LogLevel> = {
  [logLevel.ERROR]: 'ERROR',
  [logLevel.WARN]: 'WARN',
  [logLevel.INFO]: 'INFO',
  [logLevel.DEBUG]: 'DEBUG',
};

/**
 * kafkajs logs every error response at ERROR before its retrier handles it (for example
 * CONCURRENT_TRANSACTIONS while a fenced transaction is being aborted). Those surface as
 * exceptions when they matter, so the per-response lines are logged at DEBUG.
 */
export const kafkaLogCreator: logCreator = () => (entry) => {
  const detail: Record<string, unknown> = { ...entry.log };
  const message = String(detail.message ?? '');
  for (const k of ['message', 'timestamp', 'logger']) delete detail[k];
  const perResponse = /^(\[Connection\] )?Response /.test(message);
  log(
    perResponse ? 'DEBUG' : (LEVEL[entry.level] ?? 'INFO'),
    'kafkajs',
    `${entry.namespace ? `[${entry.namespace}] ` : ''}${message}`,
    detail,
  );
};
