/**
 * The one translation from onceflow's Kafka settings to a kafkajs client configuration
 * (brokers, TLS, SASL, and its log into onceflow's: ./log), used by every Kafka client onceflow and its tools open, so that a
 * secured cluster is reached the same way by the worker, the CLI and the harness.
 */
import type { KafkaConfig } from 'kafkajs';
import type { KafkaSettings } from '../config';
import { kafkaLogCreator } from './log';

export type KafkaClientConfig = Pick<KafkaConfig, 'ssl' | 'sasl' | 'logCreator'> & {
  brokers: string[];
  clientId: string;
};

export function kafkaClientConfig(k: KafkaSettings, clientId: string): KafkaClientConfig {
  return {
    brokers: k.brokers,
    clientId,
    logCreator: kafkaLogCreator,
    ...(k.ssl ? { ssl: k.ssl } : {}),
    ...(k.sasl ? { sasl: k.sasl } : {}),
  };
}
