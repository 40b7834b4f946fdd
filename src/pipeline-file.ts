/**
 * Pipeline config files (YAML or JSON), for the CLI (`onceflow start`, `run`, …) and library
 * users (loadPipelineConfig in the public API). Checked against the config file schema
 * (src/schema/config-file.ts, whose pipeline part definePipeline checks too, and from which
 * schema/pipeline-config.schema.json is generated for editors); every problem names its field
 * and the fix.
 * `connections` may carry credentials: they are used by this process only and never enter
 * the pipeline definition, which is what travels through workflow history.
 */
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { connectionSettings, type Settings } from './config';
import { ValidationError } from './errors';
import { configFileSchema } from './schema/config-file';
import { validate } from './schema/problems';
import type { PipelineSpec } from './spec';

export interface PipelineConfig {
  spec: PipelineSpec;
  taskQueue: string;
  settings: Settings;
}

/**
 * Reads and validates a config file; throws ValidationError naming each bad field.
 * @param env - the environment its `connections` are written over (default: this process's, src/config/)
 */
export function loadPipelineConfig(file: string, env?: NodeJS.ProcessEnv): PipelineConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ValidationError(`config file ${file}`, [
      { field: '(file)', problem: `cannot be read: ${(e as Error).message}` },
    ]);
  }
  let raw: unknown;
  try {
    raw = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    const message = (e as Error).message;
    throw new ValidationError(`config file ${file}`, [
      {
        field: '(file)',
        problem: file.endsWith('.json')
          ? `is not valid JSON: ${jsonProblem(text, message)}`
          : `is not valid YAML: ${message.split('\n')[0]}`,
      },
    ]);
  }
  const cfg = validate(configFileSchema, raw, `config file ${file}`, '(file)', 'pipeline.');
  const settings = connectionSettings(cfg.connections, dirname(file), env);
  return { spec: cfg.pipeline, taskQueue: cfg.taskQueue ?? settings.temporal.taskQueue, settings };
}

/**
 * JSON.parse's complaint without the text it quotes around the error (Node 20 quotes up to ten
 * characters each side: an unquoted password among them), with the line and column instead.
 */
function jsonProblem(text: string, message: string): string {
  const what = message
    .replace(/(?: in JSON)? at position \d+.*$/s, '')
    .replace(/,? (?:"|\.\.\.").*$/s, '')
    .replace(/ '[\s\S]'$/, '');
  const at = /at position (\d+)/.exec(message);
  const pos = at ? Number(at[1]) : badCharacterAt(text);
  if (pos === undefined) return what;
  const before = text.slice(0, pos).split('\n');
  return `${what} at line ${before.length}, column ${before.at(-1)!.length + 1}`;
}

/** Where JSON.parse stops: the end of the longest prefix that is still the start of a JSON text. */
function badCharacterAt(text: string): number | undefined {
  // A prefix that stops inside a JSON text fails at its end (or "end of JSON input").
  const startOfJson = (n: number) => {
    try {
      JSON.parse(text.slice(0, n));
      return true;
    } catch (e) {
      const m = (e as Error).message;
      return /end of JSON input/.test(m) || /at position (\d+)/.exec(m)?.[1] === String(n);
    }
  };
  if (startOfJson(text.length)) return undefined;
  let lo = 0; // the empty text is the start of any JSON text
  let hi = text.length;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (startOfJson(mid)) lo = mid;
    else hi = mid;
  }
  return hi - 1;
}
