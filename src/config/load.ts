/** Every setting, from the environment (then the services file): loadSettings. */
import { existsSync } from 'node:fs';
import { ConfigError } from '../errors';
import { flag, intSetting, optional, positive, secret, servicesEnv, type Get } from './env';
import { kafkaSasl, mysqlSsl, temporalTls, tlsFiles, tlsWanted } from './security';
import { DEFAULTS, defaultWebUi, type KafkaSettings, type Settings, type SettingsHooks } from './settings';

function kafkaSettings(get: Get, hooks: SettingsHooks): KafkaSettings {
  const brokers = (get('ONCEFLOW_KAFKA_BROKERS') ?? DEFAULTS.kafkaBrokers)
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  if (brokers.length === 0) throw new ConfigError('ONCEFLOW_KAFKA_BROKERS', 'lists no broker (host:port,...)');
  const files = tlsFiles(get, 'ONCEFLOW_KAFKA_SSL');
  const servername = get('ONCEFLOW_KAFKA_SSL_SERVER_NAME');
  const sasl = kafkaSasl(get, hooks);
  const tls = tlsWanted(get, 'ONCEFLOW_KAFKA_SSL', files, servername);
  if (
    (sasl?.mechanism === 'plain' || sasl?.mechanism === 'oauthbearer') &&
    !tls &&
    !flag(get, 'ONCEFLOW_KAFKA_SASL_PLAINTEXT')
  )
    throw new ConfigError(
      'ONCEFLOW_KAFKA_SASL_MECHANISM',
      `is ${sasl.mechanism}, which sends the ${sasl.mechanism === 'plain' ? 'password' : 'token'} as it is, but TLS to Kafka is off: turn it on (ONCEFLOW_KAFKA_SSL=true or a CA file), use scram-sha-512, or set ONCEFLOW_KAFKA_SASL_PLAINTEXT=true to send it unencrypted anyway (a SASL_PLAINTEXT listener on a network you trust)`,
    );
  const rf = get('ONCEFLOW_KAFKA_REPLICATION_FACTOR');
  const replicationFactor =
    rf === undefined || rf === '' || rf === '-1'
      ? -1
      : positive('ONCEFLOW_KAFKA_REPLICATION_FACTOR', intSetting('ONCEFLOW_KAFKA_REPLICATION_FACTOR', rf, -1));
  return {
    brokers,
    clientId: get('ONCEFLOW_KAFKA_CLIENT_ID') ?? 'onceflow',
    ...(tls ? { ssl: { ...files, ...optional('servername', servername), rejectUnauthorized: true as const } } : {}),
    ...(sasl ? { sasl } : {}),
    replicationFactor,
  };
}

/** The Web UI's base URL: printed by start and run, so it may carry no user:password@. */
function webUi(given: string | undefined, address: string): string {
  if (given !== undefined && /^[a-z][a-z0-9+.-]*:\/\/[^/]*@/i.test(given))
    throw new ConfigError(
      'ONCEFLOW_TEMPORAL_UI',
      'holds a user name or password (user:password@…), which onceflow would print with every link; give the URL without it',
    );
  return (given ?? defaultWebUi(address)).replace(/\/+$/, '');
}

/**
 * Every setting, from the environment (then the services file).
 * @param hooks - what the environment cannot carry, e.g. a Kafka OAUTHBEARER token provider
 */
export function loadSettings(
  env: NodeJS.ProcessEnv = process.env,
  hooks: SettingsHooks = {},
  opts: {
    /** False for a caller that opens no MySQL connection (`onceflow init`, `produce`, `replay <file>`): the password may be unset, and is then ''. */
    mysql?: boolean;
  } = {},
): Settings {
  const file = servicesEnv(env);
  // A setting given either way (NAME or NAME_FILE) in the environment hides both ways in the
  // services file: a config file's passwordFile is not "both set" with the dev stack's password.
  const pair = (k: string) => (k.endsWith('_FILE') ? k.slice(0, -'_FILE'.length) : `${k}_FILE`);
  const get: Get = (k) => env[k] ?? (env[pair(k)] === undefined ? file[k] : undefined);
  const password = secret(get, 'ONCEFLOW_MYSQL_PASSWORD') ?? (opts.mysql === false ? '' : undefined);
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
      webUi: webUi(get('ONCEFLOW_TEMPORAL_UI'), get('ONCEFLOW_TEMPORAL_ADDRESS') ?? DEFAULTS.temporalAddress),
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
