/**
 * Opens every client a tool needs (Temporal client, Kafka admin and cluster, MySQL pool) from
 * one set of settings, each failure naming the service, its address and what to do. Used by the
 * CLI, the demo and the tests; the worker opens its Kafka and MySQL clients with openKafka and
 * openPool and its own Temporal connection (src/worker.ts).
 */
import { connect as connectTls } from 'node:tls';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { createPool, type Pool, type PoolOptions } from 'mysql2/promise';
import type { Client } from '@temporalio/client';
import { connectClient } from './client';
import { loadSettings, type Settings, type TemporalSettings } from './config';
import { errorMessage } from './errors';
import { kafkaClientConfig } from './kafka/client-config';
import { connectCluster, type KafkaCluster } from './kafka/internals';

export interface Connections {
  settings: Settings;
  kafka: Kafka;
  admin: Admin;
  pool: Pool;
  cluster: KafkaCluster;
  client: Client;
  close(): Promise<void>;
}

/** The services whose TLS settings include the name to check the server's certificate for (MySQL's do not). */
const SERVER_NAME_SETTING = new Set(['ONCEFLOW_KAFKA_SSL', 'ONCEFLOW_TEMPORAL_TLS']);

/**
 * What to do about a TLS or authentication failure, from its message, or undefined when it is
 * neither; `prefix` names the settings of the service (e.g. ONCEFLOW_KAFKA_SSL).
 */
export function securityHint(e: unknown, prefix: string): string | undefined {
  const msg = errorMessage(e).replace(/\s+/g, ' ').trim();
  if (
    /self[- ]signed certificate|unable to (get local issuer|verify the first) certificate|UnknownIssuer|CERTIFICATE_VERIFY_FAILED|certificate verify failed|unknown ca/i.test(
      msg,
    )
  ) {
    return `the server's certificate is not signed by a CA this client trusts (${msg}) — set ${prefix}_CA_FILE to the CA that signed it`;
  }
  if (/altnames|does not match certificate|NotValidForName|hostname mismatch|ERR_TLS_CERT_ALTNAME_INVALID/i.test(msg)) {
    return `the server's certificate does not name the host connected to (${msg}) — connect by a name it lists${SERVER_NAME_SETTING.has(prefix) ? `, or set ${prefix}_SERVER_NAME` : ''}`;
  }
  if (/certificate required|handshake failure|bad certificate|CertificateRequired/i.test(msg)) {
    return `the server refused this client's certificate (${msg}) — set ${prefix}_CERT_FILE and ${prefix}_KEY_FILE to a client certificate the server trusts`;
  }
  if (/SASL .*authentication failed|Authentication failed|SaslAuthenticate/i.test(msg)) {
    return `the broker refused the SASL login (${msg}) — check ONCEFLOW_KAFKA_SASL_USERNAME, the password (ONCEFLOW_KAFKA_SASL_PASSWORD or _FILE) and ONCEFLOW_KAFKA_SASL_MECHANISM`;
  }
  if (/does not support secure connection|SSL connection is required|secure transport/i.test(msg)) {
    return `TLS and the server disagree (${msg}) — the server ${/does not support/i.test(msg) ? 'offers no TLS, and onceflow never falls back to plaintext' : 'requires TLS: set ' + prefix + '=true'}`;
  }
  return undefined;
}

/**
 * The Temporal clients report a failed TLS handshake as "Failed to connect before the deadline"
 * or a bare transport error. With TLS configured, one handshake from node:tls with the same CA,
 * client certificate and server name tells why (untrusted CA, wrong name, refused certificate).
 */
export function temporalTlsProblem(t: TemporalSettings): Promise<Error | undefined> {
  if (!t.tls) return Promise.resolve(undefined);
  const host = t.address.replace(/:\d+$/, '');
  const port = Number(/:(\d+)$/.exec(t.address)?.[1] ?? 7233);
  return new Promise((resolve) => {
    const socket = connectTls({
      host,
      port,
      ...(t.tls?.serverRootCACertificate ? { ca: Buffer.from(t.tls.serverRootCACertificate) } : {}),
      ...(t.tls?.clientCertPair
        ? { cert: Buffer.from(t.tls.clientCertPair.crt), key: Buffer.from(t.tls.clientCertPair.key) }
        : {}),
      servername: t.tls?.serverNameOverride ?? host,
      ALPNProtocols: ['h2'],
    });
    const done = (e?: Error) => {
      socket.destroy();
      resolve(e);
    };
    // TLS 1.3: a server refuses a client certificate only after the handshake completed.
    socket.once('secureConnect', () => setTimeout(() => done(), 1000).unref());
    socket.once('error', (e) => done(e));
    socket.setTimeout(5000, () => done());
  });
}

/** A failure to connect, as one line naming the service, its address and what to do. */
export function unreachable(
  service: 'Temporal' | 'Kafka' | 'MySQL',
  settings: Settings,
): (e: unknown) => Promise<never> {
  const [where, prefix, otherwise]: [string, string, string] = {
    Temporal: [settings.temporal.address, 'ONCEFLOW_TEMPORAL_TLS', '; is it running? (npm run services -- up)'],
    Kafka: [settings.kafka.brokers.join(','), 'ONCEFLOW_KAFKA_SSL', '; is it running?'],
    MySQL: [`${settings.mysql.host}:${settings.mysql.port} as ${settings.mysql.user}`, 'ONCEFLOW_MYSQL_SSL', ''],
  }[service] as [string, string, string];
  return async (e) => {
    const cause = (service === 'Temporal' && (await temporalTlsProblem(settings.temporal))) || e;
    throw new Error(
      `cannot reach ${service} at ${where} (${securityHint(cause, prefix) ?? `${errorMessage(cause)}${otherwise}`})`,
    );
  };
}

/** A kafkajs client with its admin and a raw cluster connection, each connected (and authenticated). */
export async function openKafka(
  settings: Settings,
  clientId: string,
  level: logLevel,
): Promise<{ kafka: Kafka; admin: Admin; cluster: KafkaCluster }> {
  const kafka = new Kafka({ ...kafkaClientConfig(settings.kafka, clientId), logLevel: level, retry: { retries: 3 } });
  const admin = kafka.admin();
  const [, cluster] = await Promise.all([
    admin.connect(),
    connectCluster({ ...kafkaClientConfig(settings.kafka, `${clientId}-cluster`), logLevel: level }),
  ]).catch(async (e) => {
    await admin.disconnect().catch(() => undefined);
    return unreachable('Kafka', settings)(e);
  });
  return { kafka, admin, cluster };
}

/**
 * MariaDB ends a session whose write transaction has been idle this long (s): a frozen worker (a
 * GC pause, a suspended VM) caught inside an apply or a prepare holds row locks that other
 * partitions' epochs need, for as long as it is frozen, since its socket stays open. onceflow's
 * write transactions run their statements back to back (the source is read before they open),
 * so only a stalled process idles inside one. MySQL has no such setting (the SET fails and is
 * ignored there): docs/deploy.md §7.3.
 */
export const IDLE_WRITE_TRANSACTION_SEC = 5;

/** A MySQL pool whose first connection (login, TLS) succeeded. */
export async function openPool(settings: Settings, options: PoolOptions = {}): Promise<Pool> {
  const pool = createPool({ ...settings.mysql, ...options });
  pool.on('connection', (conn) => {
    (conn as unknown as { query(sql: string, cb: () => void): void }).query(
      `SET SESSION idle_write_transaction_timeout = ${IDLE_WRITE_TRANSACTION_SEC}`,
      () => undefined,
    );
  });
  await pool.query('SELECT 1').catch(async (e) => {
    await pool.end().catch(() => undefined);
    return unreachable('MySQL', settings)(e);
  });
  return pool;
}

export async function openConnections(
  settings: Settings = loadSettings(),
  clientId = 'onceflow-tool',
): Promise<Connections> {
  const opened: (() => Promise<unknown>)[] = [];
  const close = async () => void (await Promise.allSettled(opened.map((c) => c())));
  try {
    const client = await connectClient(settings).catch(unreachable('Temporal', settings));
    opened.push(() => client.connection.close());
    const { kafka, admin, cluster } = await openKafka(settings, clientId, logLevel.NOTHING);
    opened.push(
      () => admin.disconnect(),
      () => cluster.disconnect(),
    );
    const pool = await openPool(settings, { connectionLimit: 8 });
    opened.push(() => pool.end());
    return { settings, kafka, admin, pool, cluster, client, close };
  } catch (e) {
    await close();
    throw e;
  }
}
