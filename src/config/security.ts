/** TLS and SASL: the settings that secure each connection, checked for consistency. */
import type { SASLOptions } from 'kafkajs';
import { ConfigError } from '../errors';
import { flag, optional, readSetting, secret, type Get } from './env';
import type { MysqlSettings, SettingsHooks, TemporalSettings, TlsFiles } from './settings';

/** PEM files under PREFIX_CA_FILE, PREFIX_CERT_FILE and PREFIX_KEY_FILE; a certificate needs its key. */
export function tlsFiles(get: Get, prefix: string): TlsFiles {
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
export function tlsWanted(get: Get, prefix: string, files: TlsFiles, serverName?: string): boolean {
  const on = flag(get, prefix);
  const any = Object.keys(files).length > 0 || !!serverName;
  if (on === false && any)
    throw new ConfigError(prefix, `is false, but ${prefix}_* files are given; remove one or the other`);
  return on ?? any;
}

const SASL_MECHANISMS = ['plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer'] as const;

export function kafkaSasl(get: Get, hooks: SettingsHooks): SASLOptions | undefined {
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

export function mysqlSsl(get: Get): MysqlSettings['ssl'] {
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

export function temporalTls(get: Get, apiKey: string | undefined): Pick<TemporalSettings, 'tls'> {
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
