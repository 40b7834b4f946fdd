/**
 * The one place that reads the environment and holds every default.
 *
 * Values come from process.env first, then from the services file written by
 * `npm run services -- up` (ONCEFLOW_SERVICES_ENV, default $ONCEFLOW_RUN_DIR/services.env,
 * i.e. ~/.cache/onceflow/run/services.env); a config file's `connections` are written over
 * process.env (connectionSettings). No module outside this folder reads process.env.
 * Credentials are read here and handed to clients; they never enter workflow history,
 * memos or logs.
 *
 *   ./settings          what the settings are: their shapes and defaults
 *   ./env               reading values: environment, services file, secrets, flags, integers
 *   ./security          TLS and SASL for each connection
 *   ./load              loadSettings: every setting
 *   ./connections-file  a config file's `connections` as environment
 */
export { DEFAULTS, defaultWebUi } from './settings';
export type { KafkaSettings, MysqlSettings, Settings, SettingsHooks, TemporalSettings, TlsFiles } from './settings';
export { npmLifecycleEvent, onceflowHome, parseEnvFile, runDir, toolPaths } from './env';
export { loadSettings } from './load';
export { connectionSettings, FIELD_SETTINGS } from './connections-file';
