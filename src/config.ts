/**
 * The one place that reads the environment and holds every default.
 *
 * Values come from process.env first, then from the services file written by
 * `npm run services -- up` (ONCEFLOW_SERVICES_ENV, default $ONCEFLOW_RUN_DIR/services.env,
 * i.e. ~/.cache/onceflow/run/services.env).
 * Credentials are read here and handed to clients; they never enter workflow history,
 * memos or logs.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from './errors';

export interface KafkaSettings {
  brokers: string[];
  clientId: string;
}

export interface MysqlSettings {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
}

export interface TemporalSettings {
  address: string;
  namespace: string;
  taskQueue: string;
  /** Base URL of the Temporal Web UI (ONCEFLOW_TEMPORAL_UI); default: port 8233 on the server's host. */
  webUi: string;
}

/** The Web UI a dev server beside `address` serves: same host, port 8233. */
export const defaultWebUi = (address: string) => `http://${address.replace(/:\d+$/, '')}:8233`;

export interface Settings {
  kafka: KafkaSettings;
  mysql: MysqlSettings;
  temporal: TemporalSettings;
  /** Port of the worker's Prometheus endpoint; 0 disables it. */
  metricsPort: number;
  /**
   * Activity tasks one worker runs at once (ONCEFLOW_MAX_CONCURRENT_ACTIVITIES, default 64). A
   * worker with every slot busy stops polling, so no further task waits on it.
   */
  maxConcurrentActivities: number;
  /** Module the worker, verify and replay load user transforms from (ONCEFLOW_TRANSFORMS, or --transforms). */
  transformsModule?: string;
  /** A prebuilt workflow bundle (ONCEFLOW_WORKFLOW_BUNDLE); absent: the worker bundles src/workflows itself. */
  workflowBundle?: string;
  /** Fault injection for tests and the fault campaign; both absent on a production worker. */
  faults: { rules?: string; file?: string };
}

export const DEFAULTS = {
  temporalAddress: '127.0.0.1:7233',
  namespace: 'default',
  taskQueue: 'onceflow',
  kafkaBrokers: '127.0.0.1:9092',
  mysqlHost: '127.0.0.1',
  mysqlPort: 3306,
  mysqlDatabase: 'onceflow',
  mysqlUser: 'onceflow',
  metricsPort: 0,
  maxConcurrentActivities: 64,
} as const;

export function onceflowHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.ONCEFLOW_HOME || join(homedir(), '.cache', 'onceflow');
}

/** Parses a KEY=VALUE file (comments and blank lines ignored). */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    const eq = t.indexOf('=');
    if (eq <= 0) continue;
    out[t.slice(0, eq)] = t.slice(eq + 1);
  }
  return out;
}

function servicesEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const file = env.ONCEFLOW_SERVICES_ENV || join(env.ONCEFLOW_RUN_DIR || join(onceflowHome(env), 'run'), 'services.env');
  return existsSync(file) ? parseEnvFile(readFileSync(file, 'utf8')) : {};
}

function positive(name: string, n: number): number {
  if (n === 0) throw new ConfigError(name, 'must be at least 1 (a worker with no activity slot runs nothing)');
  return n;
}

function intSetting(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) {
    throw new ConfigError(name, `must be a non-negative integer, got '${raw}'`);
  }
  return n;
}

export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const file = servicesEnv(env);
  const get = (k: string): string | undefined => env[k] ?? file[k];
  const password = get('ONCEFLOW_MYSQL_PASSWORD');
  if (password === undefined) {
    throw new ConfigError(
      'ONCEFLOW_MYSQL_PASSWORD',
      'is not set. Export it, or run `npm run services -- up`, which writes it to the services file',
    );
  }
  const brokers = (get('ONCEFLOW_KAFKA_BROKERS') ?? DEFAULTS.kafkaBrokers)
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  if (brokers.length === 0) throw new ConfigError('ONCEFLOW_KAFKA_BROKERS', 'lists no broker (host:port,...)');
  return {
    kafka: { brokers, clientId: get('ONCEFLOW_KAFKA_CLIENT_ID') ?? 'onceflow' },
    mysql: {
      host: get('ONCEFLOW_MYSQL_HOST') ?? DEFAULTS.mysqlHost,
      port: intSetting('ONCEFLOW_MYSQL_PORT', get('ONCEFLOW_MYSQL_PORT'), DEFAULTS.mysqlPort),
      database: get('ONCEFLOW_MYSQL_DATABASE') ?? DEFAULTS.mysqlDatabase,
      user: get('ONCEFLOW_MYSQL_USER') ?? DEFAULTS.mysqlUser,
      password,
    },
    temporal: {
      address: get('ONCEFLOW_TEMPORAL_ADDRESS') ?? DEFAULTS.temporalAddress,
      namespace: get('ONCEFLOW_TEMPORAL_NAMESPACE') ?? DEFAULTS.namespace,
      taskQueue: get('ONCEFLOW_TASK_QUEUE') ?? DEFAULTS.taskQueue,
      webUi: (get('ONCEFLOW_TEMPORAL_UI') ?? defaultWebUi(get('ONCEFLOW_TEMPORAL_ADDRESS') ?? DEFAULTS.temporalAddress)).replace(/\/+$/, ''),
    },
    metricsPort: intSetting('ONCEFLOW_METRICS_PORT', get('ONCEFLOW_METRICS_PORT'), DEFAULTS.metricsPort),
    maxConcurrentActivities: positive('ONCEFLOW_MAX_CONCURRENT_ACTIVITIES', intSetting('ONCEFLOW_MAX_CONCURRENT_ACTIVITIES', get('ONCEFLOW_MAX_CONCURRENT_ACTIVITIES'), DEFAULTS.maxConcurrentActivities)),
    ...optional('transformsModule', env.ONCEFLOW_TRANSFORMS),
    ...optional('workflowBundle', workflowBundle(env.ONCEFLOW_WORKFLOW_BUNDLE)),
    faults: { ...optional('rules', env.ONCEFLOW_FAULTS), ...optional('file', env.ONCEFLOW_FAULTS_FILE) },
  };
}

const optional = <K extends string>(k: K, v: string | undefined): { [P in K]?: string } => (v ? ({ [k]: v } as { [P in K]?: string }) : {});

function workflowBundle(path: string | undefined): string | undefined {
  if (!path) return undefined;
  if (!existsSync(path)) {
    throw new ConfigError('ONCEFLOW_WORKFLOW_BUNDLE', `names '${path}', which does not exist; build it (npx tsx scripts/bundle-workflows.ts ${path}) or unset the variable`);
  }
  return path;
}

/** Paths of the tools the services script installed (Kafka jars, Temporal CLI). */
export function toolPaths(env: NodeJS.ProcessEnv = process.env): { kafkaLibs?: string; temporalBin?: string } {
  const file = servicesEnv(env);
  return {
    kafkaLibs: env.ONCEFLOW_KAFKA_LIBS ?? file.ONCEFLOW_KAFKA_LIBS,
    temporalBin: env.ONCEFLOW_TEMPORAL_BIN ?? file.ONCEFLOW_TEMPORAL_BIN,
  };
}
