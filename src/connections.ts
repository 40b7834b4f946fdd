/**
 * Opens every client a tool needs (Temporal client, Kafka admin and cluster, MySQL pool) from
 * one set of settings, each failure naming the service and its address. Used by the CLI, the
 * demo and the tests; workers build their own (src/worker.ts).
 */
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { createPool, type Pool } from 'mysql2/promise';
import type { Client } from '@temporalio/client';
import { connectClient } from './client';
import { loadSettings, type Settings } from './config';
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

export async function openConnections(settings: Settings = loadSettings(), clientId = 'onceflow-tool'): Promise<Connections> {
  const opened: (() => Promise<unknown>)[] = [];
  const close = async () => void (await Promise.allSettled(opened.map((c) => c())));
  try {
    const client = await connectClient(settings).catch((e) => {
      throw new Error(`cannot reach Temporal at ${settings.temporal.address} (${errorMessage(e)}); is it running? (npm run services -- up)`);
    });
    opened.push(() => client.connection.close());
    const kafka = new Kafka({ ...kafkaClientConfig(settings.kafka, clientId), logLevel: logLevel.NOTHING, retry: { retries: 3 } });
    const admin = kafka.admin();
    const cluster = await Promise.all([admin.connect(), connectCluster({ ...kafkaClientConfig(settings.kafka, clientId), logLevel: logLevel.NOTHING })])
      .then(([, c]) => c)
      .catch((e) => {
        throw new Error(`cannot reach Kafka at ${settings.kafka.brokers.join(',')} (${errorMessage(e)}); is it running?`);
      });
    opened.push(() => admin.disconnect(), () => cluster.disconnect());
    const pool = createPool({ ...settings.mysql, connectionLimit: 8 });
    opened.push(() => pool.end());
    await pool.query('SELECT 1').catch((e) => {
      throw new Error(`cannot reach MySQL at ${settings.mysql.host}:${settings.mysql.port} as ${settings.mysql.user} (${errorMessage(e)})`);
    });
    return { settings, kafka, admin, pool, cluster, client, close };
  } catch (e) {
    await close();
    throw e;
  }
}
