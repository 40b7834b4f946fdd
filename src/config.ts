/**
 * The one place that reads the environment and holds every default.
 *
 * Values come from process.env first, then from the services file written by
 * `npm run services -- up` (ONCEFLOW_SERVICES_ENV, default $ONCEFLOW_RUN_DIR/services.env,
 * i.e. ~/.cache/onceflow/run/services.env); a config file's `connections` are written over
 * process.env (connectionSettings). No other module reads process.env.
 * Credentials are read here and handed to clients; they never enter workflow history,
 * memos or logs.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { SASLOptions } from 'kafkajs';
import { ConfigError, ValidationError } from './errors';

/** TLS material as PEM text, read from the files the settings name. */
export interface TlsFiles {
  /** Trusted CA(s); absent: the system's trust store. */
  ca?: string;
  /** Client certificate and key (mutual TLS). */
  cert?: string;
  key?: string;
}

export interface KafkaSettings {
  brokers: string[];
  clientId: string;
  /** TLS to every broker (ONCEFLOW_KAFKA_SSL*); absent: plaintext. */
  ssl?: TlsFiles & { servername?: string; rejectUnauthorized: true };
  /** SASL (ONCEFLOW_KAFKA_SASL_*): PLAIN, SCRAM-SHA-256/512, or OAUTHBEARER with a token provider from the library API. */
  sasl?: SASLOptions;
  /** Replication factor of the topics onceflow creates (ONCEFLOW_KAFKA_REPLICATION_FACTOR); -1: the broker's default.replication.factor. */
  replicationFactor: number;
}

export interface MysqlSettings {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  /** TLS (ONCEFLOW_MYSQL_SSL*): when set, a server without TLS is refused, never used in plaintext. */
  ssl?: TlsFiles & { minVersion: 'TLSv1.2' | 'TLSv1.3'; rejectUnauthorized: true };
}

export interface TemporalSettings {
  address: string;
  namespace: string;
  taskQueue: string;
  /** Base URL of the Temporal Web UI (ONCEFLOW_TEMPORAL_UI); default: port 8233 on the server's host. */
  webUi: string;
  /** TLS or mutual TLS (ONCEFLOW_TEMPORAL_TLS*), in the Temporal SDK's shape. */
  tls?: {
    serverRootCACertificate?: Buffer;
    clientCertPair?: { crt: Buffer; key: Buffer };
    serverNameOverride?: string;
  };
  /** API key (ONCEFLOW_TEMPORAL_API_KEY or _FILE), e.g. for Temporal Cloud; implies TLS. */
  apiKey?: string;
}

/** What the environment cannot carry: hooks a library user passes to {@link loadSettings}. */
export interface SettingsHooks {
  /** Token provider for Kafka SASL/OAUTHBEARER (ONCEFLOW_KAFKA_SASL_MECHANISM=oauthbearer). */
  kafkaOAuthBearerProvider?: () => Promise<{ value: string }>;
}

/** The Web UI a dev server beside `address` serves: same host, port 8233. */
export const defaultWebUi = (address: string) => `http://${address.replace(/:\d+$/, '')}:8233`;

export interface Settings {
  kafka: KafkaSettings;
  mysql: MysqlSettings;
  temporal: TemporalSettings;
  /** Port of the worker's Prometheus endpoint; 0 disables it. */
  metricsPort: number;
  /** Address the metrics endpoint listens on (ONCEFLOW_METRICS_HOST, default 127.0.0.1; 0.0.0.0 for a scraper outside the host or pod). */
  metricsHost: string;
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

/** Where scripts/services.sh keeps the local services' state and logs: ONCEFLOW_RUN_DIR, default $ONCEFLOW_HOME/run. */
export function runDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.ONCEFLOW_RUN_DIR || join(onceflowHome(env), 'run');
}

function servicesEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const file = env.ONCEFLOW_SERVICES_ENV || join(runDir(env), 'services.env');
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

type Get = (k: string) => string | undefined;

/** A secret from NAME or from the file NAME_FILE (one trailing newline dropped); both set is an error. */
function secret(get: Get, name: string): string | undefined {
  const direct = get(name);
  const file = get(`${name}_FILE`);
  if (direct !== undefined && file) throw new ConfigError(name, `and ${name}_FILE are both set; keep one`);
  return file ? readSetting(`${name}_FILE`, file).replace(/\r?\n$/, '') : direct;
}

function readSetting(name: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError(
      name,
      `names '${path}', which cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); fix the path or its permissions`,
    );
  }
}

function flag(get: Get, name: string): boolean | undefined {
  const v = get(name);
  if (v === undefined || v === '') return undefined;
  if (/^(true|1|yes|on)$/i.test(v)) return true;
  if (/^(false|0|no|off)$/i.test(v)) return false;
  throw new ConfigError(name, `must be true or false, got '${v}'`);
}

/** PEM files under PREFIX_CA_FILE, PREFIX_CERT_FILE and PREFIX_KEY_FILE; a certificate needs its key. */
function tlsFiles(get: Get, prefix: string): TlsFiles {
  const read = (k: string) =>
    get(`${prefix}_${k}_FILE`) ? readSetting(`${prefix}_${k}_FILE`, get(`${prefix}_${k}_FILE`)!) : undefined;
  const out = { ...optional('ca', read('CA')), ...optional('cert', read('CERT')), ...optional('key', read('KEY')) };
  if (!out.cert !== !out.key) {
    throw new ConfigError(
      `${prefix}_${out.cert ? 'KEY' : 'CERT'}_FILE`,
      `is not set, but ${prefix}_${out.cert ? 'CERT' : 'KEY'}_FILE is: a client certificate needs its key and the key its certificate`,
    );
  }
  return out;
}

/** TLS is on when PREFIX (true/false) says so, or when any of its files is given. */
function tlsWanted(get: Get, prefix: string, files: TlsFiles, serverName?: string): boolean {
  const on = flag(get, prefix);
  const any = Object.keys(files).length > 0 || !!serverName;
  if (on === false && any)
    throw new ConfigError(prefix, `is false, but ${prefix}_* files are given; remove one or the other`);
  return on ?? any;
}

const SASL_MECHANISMS = ['plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer'] as const;

function kafkaSasl(get: Get, hooks: SettingsHooks): SASLOptions | undefined {
  const raw = get('ONCEFLOW_KAFKA_SASL_MECHANISM');
  if (!raw) return undefined;
  const mechanism = raw.toLowerCase() as (typeof SASL_MECHANISMS)[number];
  if (!SASL_MECHANISMS.includes(mechanism))
    throw new ConfigError(
      'ONCEFLOW_KAFKA_SASL_MECHANISM',
      `must be one of ${SASL_MECHANISMS.join(', ')}, got '${raw}'`,
    );
  if (mechanism === 'oauthbearer') {
    if (!hooks.kafkaOAuthBearerProvider) {
      throw new ConfigError(
        'ONCEFLOW_KAFKA_SASL_MECHANISM',
        'is oauthbearer, which needs a token provider: start the worker from code with createOnceflowWorker({ settings: loadSettings(process.env, { kafkaOAuthBearerProvider }) })',
      );
    }
    return { mechanism, oauthBearerProvider: hooks.kafkaOAuthBearerProvider };
  }
  const username = get('ONCEFLOW_KAFKA_SASL_USERNAME');
  if (!username)
    throw new ConfigError('ONCEFLOW_KAFKA_SASL_USERNAME', `is not set, but SASL ${mechanism} needs a user name`);
  const password = secret(get, 'ONCEFLOW_KAFKA_SASL_PASSWORD');
  if (password === undefined)
    throw new ConfigError(
      'ONCEFLOW_KAFKA_SASL_PASSWORD',
      `is not set (nor ONCEFLOW_KAFKA_SASL_PASSWORD_FILE), but SASL ${mechanism} needs the password of '${username}'`,
    );
  return { mechanism, username, password };
}

function kafkaSettings(get: Get, hooks: SettingsHooks): KafkaSettings {
  const brokers = (get('ONCEFLOW_KAFKA_BROKERS') ?? DEFAULTS.kafkaBrokers)
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  if (brokers.length === 0) throw new ConfigError('ONCEFLOW_KAFKA_BROKERS', 'lists no broker (host:port,...)');
  const files = tlsFiles(get, 'ONCEFLOW_KAFKA_SSL');
  const servername = get('ONCEFLOW_KAFKA_SSL_SERVER_NAME');
  const sasl = kafkaSasl(get, hooks);
  const rf = get('ONCEFLOW_KAFKA_REPLICATION_FACTOR');
  const replicationFactor =
    rf === undefined || rf === '' || rf === '-1'
      ? -1
      : positive('ONCEFLOW_KAFKA_REPLICATION_FACTOR', intSetting('ONCEFLOW_KAFKA_REPLICATION_FACTOR', rf, -1));
  return {
    brokers,
    clientId: get('ONCEFLOW_KAFKA_CLIENT_ID') ?? 'onceflow',
    ...(tlsWanted(get, 'ONCEFLOW_KAFKA_SSL', files, servername)
      ? { ssl: { ...files, ...optional('servername', servername), rejectUnauthorized: true as const } }
      : {}),
    ...(sasl ? { sasl } : {}),
    replicationFactor,
  };
}

function mysqlSsl(get: Get): MysqlSettings['ssl'] {
  const files = tlsFiles(get, 'ONCEFLOW_MYSQL_SSL');
  const min = get('ONCEFLOW_MYSQL_SSL_MIN_VERSION') || 'TLSv1.2';
  if (min !== 'TLSv1.2' && min !== 'TLSv1.3')
    throw new ConfigError('ONCEFLOW_MYSQL_SSL_MIN_VERSION', `must be TLSv1.2 or TLSv1.3, got '${min}'`);
  if (!tlsWanted(get, 'ONCEFLOW_MYSQL_SSL', files)) {
    if (get('ONCEFLOW_MYSQL_SSL_MIN_VERSION'))
      throw new ConfigError(
        'ONCEFLOW_MYSQL_SSL_MIN_VERSION',
        'is set, but TLS is not: set ONCEFLOW_MYSQL_SSL=true or a CA file',
      );
    return undefined;
  }
  return { ...files, minVersion: min, rejectUnauthorized: true };
}

function temporalTls(get: Get, apiKey: string | undefined): Pick<TemporalSettings, 'tls'> {
  const files = tlsFiles(get, 'ONCEFLOW_TEMPORAL_TLS');
  const name = get('ONCEFLOW_TEMPORAL_TLS_SERVER_NAME');
  if (!tlsWanted(get, 'ONCEFLOW_TEMPORAL_TLS', files, name) && !apiKey) return {};
  if (flag(get, 'ONCEFLOW_TEMPORAL_TLS') === false)
    throw new ConfigError('ONCEFLOW_TEMPORAL_TLS', 'is false, but an API key is set: API keys are only sent over TLS');
  return {
    tls: {
      ...(files.ca ? { serverRootCACertificate: Buffer.from(files.ca) } : {}),
      ...(files.cert && files.key
        ? { clientCertPair: { crt: Buffer.from(files.cert), key: Buffer.from(files.key) } }
        : {}),
      ...optional('serverNameOverride', name),
    },
  };
}

/**
 * Every setting, from the environment (then the services file).
 * @param hooks - what the environment cannot carry, e.g. a Kafka OAUTHBEARER token provider
 */
export function loadSettings(env: NodeJS.ProcessEnv = process.env, hooks: SettingsHooks = {}): Settings {
  const file = servicesEnv(env);
  const get: Get = (k) => env[k] ?? file[k];
  const password = secret(get, 'ONCEFLOW_MYSQL_PASSWORD');
  if (password === undefined) {
    throw new ConfigError(
      'ONCEFLOW_MYSQL_PASSWORD',
      'is not set (nor ONCEFLOW_MYSQL_PASSWORD_FILE). Export it, or run `npm run services -- up`, which writes it to the services file',
    );
  }
  const apiKey = secret(get, 'ONCEFLOW_TEMPORAL_API_KEY');
  const ssl = mysqlSsl(get);
  return {
    kafka: kafkaSettings(get, hooks),
    mysql: {
      host: get('ONCEFLOW_MYSQL_HOST') ?? DEFAULTS.mysqlHost,
      port: intSetting('ONCEFLOW_MYSQL_PORT', get('ONCEFLOW_MYSQL_PORT'), DEFAULTS.mysqlPort),
      database: get('ONCEFLOW_MYSQL_DATABASE') ?? DEFAULTS.mysqlDatabase,
      user: get('ONCEFLOW_MYSQL_USER') ?? DEFAULTS.mysqlUser,
      password,
      ...(ssl ? { ssl } : {}),
    },
    temporal: {
      address: get('ONCEFLOW_TEMPORAL_ADDRESS') ?? DEFAULTS.temporalAddress,
      namespace: get('ONCEFLOW_TEMPORAL_NAMESPACE') ?? DEFAULTS.namespace,
      taskQueue: get('ONCEFLOW_TASK_QUEUE') ?? DEFAULTS.taskQueue,
      webUi: (
        get('ONCEFLOW_TEMPORAL_UI') ?? defaultWebUi(get('ONCEFLOW_TEMPORAL_ADDRESS') ?? DEFAULTS.temporalAddress)
      ).replace(/\/+$/, ''),
      ...temporalTls(get, apiKey),
      ...optional('apiKey', apiKey),
    },
    metricsPort: intSetting('ONCEFLOW_METRICS_PORT', get('ONCEFLOW_METRICS_PORT'), DEFAULTS.metricsPort),
    metricsHost: get('ONCEFLOW_METRICS_HOST') || '127.0.0.1',
    maxConcurrentActivities: positive(
      'ONCEFLOW_MAX_CONCURRENT_ACTIVITIES',
      intSetting(
        'ONCEFLOW_MAX_CONCURRENT_ACTIVITIES',
        get('ONCEFLOW_MAX_CONCURRENT_ACTIVITIES'),
        DEFAULTS.maxConcurrentActivities,
      ),
    ),
    ...optional('transformsModule', env.ONCEFLOW_TRANSFORMS),
    ...optional('workflowBundle', workflowBundle(env.ONCEFLOW_WORKFLOW_BUNDLE)),
    faults: { ...optional('rules', env.ONCEFLOW_FAULTS), ...optional('file', env.ONCEFLOW_FAULTS_FILE) },
  };
}

const optional = <K extends string>(k: K, v: string | undefined): { [P in K]?: string } =>
  v ? ({ [k]: v } as { [P in K]?: string }) : {};

function workflowBundle(path: string | undefined): string | undefined {
  if (!path) return undefined;
  if (!existsSync(path)) {
    throw new ConfigError(
      'ONCEFLOW_WORKFLOW_BUNDLE',
      `names '${path}', which does not exist; build it (npx tsx scripts/bundle-workflows.ts ${path}) or unset the variable`,
    );
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

/**
 * Each `connections` field and the setting it stands for: the file is another way to write the
 * environment, so loadSettings stays the one place that interprets (and validates) them.
 * `...Env` fields name an environment variable that holds the value (a secret kept out of the file).
 */
export const FIELD_SETTINGS: Readonly<Record<string, string>> = {
  'temporal.address': 'ONCEFLOW_TEMPORAL_ADDRESS',
  'temporal.namespace': 'ONCEFLOW_TEMPORAL_NAMESPACE',
  'temporal.webUi': 'ONCEFLOW_TEMPORAL_UI',
  'temporal.tls.enabled': 'ONCEFLOW_TEMPORAL_TLS',
  'temporal.tls.caFile': 'ONCEFLOW_TEMPORAL_TLS_CA_FILE',
  'temporal.tls.certFile': 'ONCEFLOW_TEMPORAL_TLS_CERT_FILE',
  'temporal.tls.keyFile': 'ONCEFLOW_TEMPORAL_TLS_KEY_FILE',
  'temporal.tls.serverName': 'ONCEFLOW_TEMPORAL_TLS_SERVER_NAME',
  'temporal.apiKeyFile': 'ONCEFLOW_TEMPORAL_API_KEY_FILE',
  'temporal.apiKeyEnv': 'ONCEFLOW_TEMPORAL_API_KEY',
  'kafka.brokers': 'ONCEFLOW_KAFKA_BROKERS',
  'kafka.replicationFactor': 'ONCEFLOW_KAFKA_REPLICATION_FACTOR',
  'kafka.ssl.enabled': 'ONCEFLOW_KAFKA_SSL',
  'kafka.ssl.caFile': 'ONCEFLOW_KAFKA_SSL_CA_FILE',
  'kafka.ssl.certFile': 'ONCEFLOW_KAFKA_SSL_CERT_FILE',
  'kafka.ssl.keyFile': 'ONCEFLOW_KAFKA_SSL_KEY_FILE',
  'kafka.ssl.serverName': 'ONCEFLOW_KAFKA_SSL_SERVER_NAME',
  'kafka.sasl.mechanism': 'ONCEFLOW_KAFKA_SASL_MECHANISM',
  'kafka.sasl.username': 'ONCEFLOW_KAFKA_SASL_USERNAME',
  'kafka.sasl.passwordFile': 'ONCEFLOW_KAFKA_SASL_PASSWORD_FILE',
  'kafka.sasl.passwordEnv': 'ONCEFLOW_KAFKA_SASL_PASSWORD',
  'mysql.host': 'ONCEFLOW_MYSQL_HOST',
  'mysql.port': 'ONCEFLOW_MYSQL_PORT',
  'mysql.database': 'ONCEFLOW_MYSQL_DATABASE',
  'mysql.user': 'ONCEFLOW_MYSQL_USER',
  'mysql.password': 'ONCEFLOW_MYSQL_PASSWORD',
  'mysql.passwordFile': 'ONCEFLOW_MYSQL_PASSWORD_FILE',
  'mysql.passwordEnv': 'ONCEFLOW_MYSQL_PASSWORD',
  'mysql.ssl.enabled': 'ONCEFLOW_MYSQL_SSL',
  'mysql.ssl.caFile': 'ONCEFLOW_MYSQL_SSL_CA_FILE',
  'mysql.ssl.certFile': 'ONCEFLOW_MYSQL_SSL_CERT_FILE',
  'mysql.ssl.keyFile': 'ONCEFLOW_MYSQL_SSL_KEY_FILE',
  'mysql.ssl.minVersion': 'ONCEFLOW_MYSQL_SSL_MIN_VERSION',
};

function flatten(o: Record<string, unknown>, prefix = ''): [string, unknown][] {
  return Object.entries(o).flatMap(([k, v]) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? flatten(v as Record<string, unknown>, `${prefix}${k}.`)
      : [[`${prefix}${k}`, v] as [string, unknown]],
  );
}

/** The environment with the file's connection values written over it; relative file paths are taken from the config file's folder. */
function connectionsEnv(
  connections: Record<string, unknown> | undefined,
  env: NodeJS.ProcessEnv,
  dir = '.',
): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...env };
  for (const [field, value] of flatten(connections ?? {})) {
    const name = FIELD_SETTINGS[field];
    if (!name || value === undefined) continue;
    let v: string;
    if (field.endsWith('Env')) {
      const held = env[String(value)];
      if (held === undefined) {
        throw new ValidationError('connections', [
          {
            field: `connections.${field}`,
            problem: `names ${String(value)}, which is not set in the environment; export it or remove the field`,
          },
        ]);
      }
      v = held;
    } else if (field.endsWith('File')) v = resolve(dir, String(value));
    else v = Array.isArray(value) ? value.join(',') : String(value);
    // A secret given one way in the file replaces the other way in the environment.
    if (name.endsWith('_FILE')) delete out[name.slice(0, -'_FILE'.length)];
    else delete out[`${name}_FILE`];
    out[name] = v;
  }
  return out;
}

/**
 * Every setting, from a config file's `connections` (relative paths taken from `dir`, the file's
 * folder) written over the environment.
 */
export function connectionSettings(
  connections: Record<string, unknown> | undefined,
  dir: string,
  env: NodeJS.ProcessEnv = process.env,
): Settings {
  return loadSettings(connectionsEnv(connections, env, dir));
}

/**
 * The npm script or npx command that started this process (npm sets npm_lifecycle_event for
 * both); undefined when npm did not start it (src/signals.ts).
 */
export function npmLifecycleEvent(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.npm_lifecycle_event || undefined;
}
