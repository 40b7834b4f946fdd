/** What the settings are: their shapes and defaults (read by ./load). */
import type { SASLOptions } from 'kafkajs';

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
  /** Module the worker (`worker`, `run`) and `verify` load user transforms from (ONCEFLOW_TRANSFORMS, or --transforms). */
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
