/** A config file's `connections`: another way to write the environment, read by loadSettings. */
import { resolve } from 'node:path';
import { ValidationError } from '../errors';
import { loadSettings } from './load';
import type { Settings } from './settings';

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
  'kafka.sasl.plaintext': 'ONCEFLOW_KAFKA_SASL_PLAINTEXT',
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
  const given = new Map<string, string>(); // a setting (without _FILE) → the field that gave it
  for (const [field, value] of flatten(connections ?? {})) {
    const name = FIELD_SETTINGS[field];
    if (!name || value === undefined) continue;
    const setting = name.replace(/_FILE$/, '');
    const earlier = given.get(setting);
    if (earlier)
      throw new ValidationError('connections', [
        { field: `connections.${field}`, problem: `and connections.${earlier} both give ${setting}; keep one` },
      ]);
    given.set(setting, field);
    let v: string;
    if (field.endsWith('Env')) {
      // The name of a variable, never its value: a secret written here by mistake is not repeated.
      const named = /^[A-Za-z_][A-Za-z0-9_]*$/.test(String(value));
      const held = named ? env[String(value)] : undefined;
      if (held === undefined) {
        throw new ValidationError('connections', [
          {
            field: `connections.${field}`,
            problem: named
              ? `names ${String(value)}, which is not set in the environment; export it or remove the field`
              : `is not the name of an environment variable (the secret itself? it is not shown): give the variable's name, or use ${field.replace(/Env$/, 'File')}`,
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
