/**
 * Reading values: the environment, the services file beside it, secrets given directly or as
 * files, flags and integers, each error naming the setting and what to do.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../errors';

export function onceflowHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.ONCEFLOW_HOME || join(homedir(), '.cache', 'onceflow');
}

/** Parses a KEY=VALUE file (comments and blank lines ignored). */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    const eq = t.indexOf('=');
    if (eq <= 0) continue;
    out[t.slice(0, eq)] = t.slice(eq + 1);
  }
  return out;
}

/** Where scripts/services.sh keeps the local services' state and logs: ONCEFLOW_RUN_DIR, default $ONCEFLOW_HOME/run. */
export function runDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.ONCEFLOW_RUN_DIR || join(onceflowHome(env), 'run');
}

export function servicesEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const file = env.ONCEFLOW_SERVICES_ENV || join(runDir(env), 'services.env');
  return existsSync(file) ? parseEnvFile(readFileSync(file, 'utf8')) : {};
}

export function positive(name: string, n: number): number {
  if (n === 0) throw new ConfigError(name, 'must be at least 1 (a worker with no activity slot runs nothing)');
  return n;
}

export function intSetting(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) {
    throw new ConfigError(name, `must be a non-negative integer, got '${raw}'`);
  }
  return n;
}

export type Get = (k: string) => string | undefined;

/** A secret from NAME or from the file NAME_FILE (one trailing newline dropped); both set is an error. */
export function secret(get: Get, name: string): string | undefined {
  const direct = get(name);
  const file = get(`${name}_FILE`);
  if (direct !== undefined && file) throw new ConfigError(name, `and ${name}_FILE are both set; keep one`);
  return file ? readSetting(`${name}_FILE`, file).replace(/\r?\n$/, '') : direct;
}

export function readSetting(name: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError(
      name,
      `names '${path}', which cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); fix the path or its permissions`,
    );
  }
}

export function flag(get: Get, name: string): boolean | undefined {
  const v = get(name);
  if (v === undefined || v === '') return undefined;
  if (/^(true|1|yes|on)$/i.test(v)) return true;
  if (/^(false|0|no|off)$/i.test(v)) return false;
  throw new ConfigError(name, `must be true or false, got '${v}'`);
}

export const optional = <K extends string>(k: K, v: string | undefined): { [P in K]?: string } =>
  v ? ({ [k]: v } as { [P in K]?: string }) : {};

/** Paths of the tools the services script installed (Kafka jars, Temporal CLI). */
export function toolPaths(env: NodeJS.ProcessEnv = process.env): { kafkaLibs?: string; temporalBin?: string } {
  const file = servicesEnv(env);
  return {
    kafkaLibs: env.ONCEFLOW_KAFKA_LIBS ?? file.ONCEFLOW_KAFKA_LIBS,
    temporalBin: env.ONCEFLOW_TEMPORAL_BIN ?? file.ONCEFLOW_TEMPORAL_BIN,
  };
}

/**
 * The npm script or npx command that started this process (npm sets npm_lifecycle_event for
 * both); undefined when npm did not start it (src/signals.ts).
 */
export function npmLifecycleEvent(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.npm_lifecycle_event || undefined;
}
