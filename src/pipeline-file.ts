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
    throw new ValidationError(`config file ${file}`, [
      {
        field: '(file)',
        problem: `is not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(e as Error).message.split('\n')[0]}`,
      },
    ]);
  }
  const cfg = validate(configFileSchema, raw, `config file ${file}`, '(file)', 'pipeline.');
  const settings = connectionSettings(cfg.connections, dirname(file), env);
  return { spec: cfg.pipeline, taskQueue: cfg.taskQueue ?? settings.temporal.taskQueue, settings };
}
