/**
 * The one translation from onceflow's Kafka settings to a kafkajs client configuration
 * (brokers, TLS, SASL), used by every Kafka client onceflow and its tools open, so that a
 * secured cluster is reached the same way by the worker, the CLI and the harness.
 */
import type { KafkaConfig } from 'kafkajs';
import type { KafkaSettings } from '../config';

export type KafkaClientConfig = Pick<KafkaConfig, 'ssl' | 'sasl'> & { brokers: string[]; clientId: string };

export function kafkaClientConfig(k: KafkaSettings, clientId: string): KafkaClientConfig {
  return { brokers: k.brokers, clientId, ...(k.ssl ? { ssl: k.ssl } : {}), ...(k.sasl ? { sasl: k.sasl } : {}) };
}
