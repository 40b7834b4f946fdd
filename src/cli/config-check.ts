/**
 * `onceflow config [config.yaml]`: the effective settings, secrets redacted, and a check of each
 * connection — Temporal (server and namespace), Kafka (brokers), MySQL (login, database and the
 * XA RECOVER privilege onceflow's recovery needs) — each failure named with what to do.
 */
import { Kafka, logLevel } from 'kafkajs';
import { createConnection } from 'mysql2/promise';
import { connectClient } from '../client';
import type { Settings } from '../config';
import { errorMessage } from '../errors';
import { securityHint, temporalTlsProblem } from '../connections';
import { kafkaClientConfig } from '../kafka/client-config';
import { withTimeout } from '../poll';
import type { CommandContext } from './context';

export interface ConnectionCheck {
  service: 'temporal' | 'kafka' | 'mysql';
  ok: boolean;
  detail: string;
}

const SECRET_KEYS = new Set(['password', 'key', 'apiKey']);
/** Certificate settings: shown by size whatever the file holds (a combined file of key and certificate, e.g. from `openssl pkcs12 -nodes`, starts with 'Bag Attributes' and holds the private key too). */
const PEM_KEYS = new Set(['ca', 'cert', 'crt', 'serverRootCACertificate']);

/**
 * The settings as onceflow uses them: every secret (passwords, private keys, API keys, any text
 * holding a PRIVATE KEY block) replaced by '(set, redacted)', certificates by '(PEM, n bytes)'
 * and functions by their kind.
 */
export function redactedSettings(settings: Settings): unknown {
  const redact = (v: unknown, k = ''): unknown => {
    if (SECRET_KEYS.has(k) || (typeof v === 'string' && v.includes('PRIVATE KEY')))
      return v ? '(set, redacted)' : '(not set)';
    if (typeof v === 'function') return '(function)';
    if (PEM_KEYS.has(k) && Array.isArray(v)) return `(PEM, ${v.length} entries)`;
    if (PEM_KEYS.has(k) || Buffer.isBuffer(v) || (typeof v === 'string' && v.startsWith('-----BEGIN')))
      return v ? `(PEM, ${(v as string | Buffer).length} bytes)` : '(not set)';
    if (Array.isArray(v)) return v.map((x) => redact(x));
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([kk, x]) => [kk, redact(x, kk)]));
    return v;
  };
  return redact(settings);
}

async function checkTemporal(s: Settings): Promise<ConnectionCheck> {
  const where = `Temporal at ${s.temporal.address}`;
  let client;
  try {
    client = await withTimeout(connectClient(s), 10_000, where);
  } catch (e) {
    const cause = (await temporalTlsProblem(s.temporal)) ?? e;
    return {
      service: 'temporal',
      ok: false,
      detail: `${where}: ${securityHint(cause, 'ONCEFLOW_TEMPORAL_TLS') ?? `cannot reach it: ${errorMessage(cause)} — check ONCEFLOW_TEMPORAL_ADDRESS and that the server runs`}`,
    };
  }
  try {
    await withTimeout(client.workflowService.describeNamespace({ namespace: s.temporal.namespace }), 10_000, where);
    return { service: 'temporal', ok: true, detail: `${where}, namespace '${s.temporal.namespace}'` };
  } catch (e) {
    const msg = errorMessage(e);
    const hint = /not ?found/i.test(msg)
      ? `namespace '${s.temporal.namespace}' does not exist there — create it or set ONCEFLOW_TEMPORAL_NAMESPACE`
      : `${msg}`;
    return { service: 'temporal', ok: false, detail: `${where}: ${hint}` };
  } finally {
    await client.connection.close();
  }
}

async function checkKafka(s: Settings): Promise<ConnectionCheck> {
  const where = `Kafka at ${s.kafka.brokers.join(',')}`;
  const admin = new Kafka({
    ...kafkaClientConfig(s.kafka, `${s.kafka.clientId}-config`),
    logLevel: logLevel.NOTHING,
    retry: { retries: 1 },
  }).admin();
  try {
    await withTimeout(admin.connect(), 15_000, where);
    const cluster = await withTimeout(admin.describeCluster(), 15_000, where);
    return {
      service: 'kafka',
      ok: true,
      detail: `${where}: ${cluster.brokers.length} broker(s), controller ${cluster.controller}`,
    };
  } catch (e) {
    return {
      service: 'kafka',
      ok: false,
      detail: `${where}: ${securityHint(e, 'ONCEFLOW_KAFKA_SSL') ?? `cannot reach it: ${errorMessage(e)} — check ONCEFLOW_KAFKA_BROKERS and that the brokers run`}`,
    };
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/** What to do about a MySQL error, by its code. */
function mysqlHint(e: unknown, s: Settings): string {
  const code = (e as { code?: string }).code;
  const m = s.mysql;
  switch (code) {
    case 'ER_ACCESS_DENIED_ERROR':
      return `wrong user or password for '${m.user}' — check ONCEFLOW_MYSQL_USER and ONCEFLOW_MYSQL_PASSWORD (or _FILE, connections.mysql.passwordEnv)${m.ssl ? '' : '; or the account requires TLS (REQUIRE SSL) and TLS is off here: set ONCEFLOW_MYSQL_SSL=true'}`;
    case 'ER_BAD_DB_ERROR':
      return `database '${m.database}' does not exist — create it, or set ONCEFLOW_MYSQL_DATABASE`;
    case 'ER_DBACCESS_DENIED_ERROR':
      return `'${m.user}' may not use database '${m.database}' — GRANT ALL ON ${m.database}.* TO it`;
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'ETIMEDOUT':
      return `nothing answers at ${m.host}:${m.port} — check ONCEFLOW_MYSQL_HOST/PORT and that the server runs`;
    default:
      return securityHint(e, 'ONCEFLOW_MYSQL_SSL') ?? errorMessage(e);
  }
}

async function checkMysql(s: Settings): Promise<ConnectionCheck> {
  const where = `MySQL at ${s.mysql.host}:${s.mysql.port} as ${s.mysql.user}`;
  let conn;
  try {
    conn = await withTimeout(createConnection({ ...s.mysql, connectTimeout: 10_000 }), 15_000, where);
  } catch (e) {
    return { service: 'mysql', ok: false, detail: `${where}: ${mysqlHint(e, s)}` };
  }
  try {
    const [rows] = await conn.query('SELECT VERSION() AS v');
    const version = String((rows as { v: string }[])[0]?.v);
    try {
      await conn.query('XA RECOVER');
    } catch (e) {
      return {
        service: 'mysql',
        ok: false,
        detail: `${where} (${version}): XA RECOVER is refused (${errorMessage(e)}) — recovery needs it: on MySQL 8 GRANT XA_RECOVER_ADMIN ON *.* TO the user`,
      };
    }
    return {
      service: 'mysql',
      ok: true,
      detail: `${where}, database '${s.mysql.database}' (${version}), XA RECOVER allowed`,
    };
  } finally {
    await conn.end().catch(() => undefined);
  }
}

/** Checks the three connections at once; never throws. */
export function checkConnections(settings: Settings): Promise<ConnectionCheck[]> {
  return Promise.all([checkTemporal(settings), checkKafka(settings), checkMysql(settings)]);
}

/** `onceflow config [file]`: exit 1 if a connection fails. */
export async function configCommand({ settings, out }: CommandContext): Promise<number> {
  const checks = await checkConnections(settings);
  out(
    [
      'effective settings (secrets redacted):',
      JSON.stringify(redactedSettings(settings), null, 2),
      ...checks.map((c) => `${c.ok ? 'ok    ' : 'FAILED'} ${c.service}: ${c.detail}`),
    ].join('\n'),
    { settings: redactedSettings(settings), checks },
  );
  return checks.every((c) => c.ok) ? 0 : 1;
}
