/**
 * Pipeline config files (YAML or JSON), for the CLI (`onceflow start`, `run`, …) and library
 * users (loadPipelineConfig in the public API). Structure is checked against
 * schema/pipeline-config.schema.json (the single source of truth for field names, shared
 * with editors), values by definePipeline; every problem names its field and the fix.
 * `connections` may carry credentials: they are used by this process only and never enter
 * the pipeline definition, which is what travels through workflow history.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { connectionSettings, type Settings } from './config';
import { ValidationError } from './errors';
import { definePipeline, REMOVED_SETTINGS, type PipelineInput, type PipelineSpec } from './spec';

interface SchemaNode {
  type?: string;
  enum?: unknown[];
  properties?: Record<string, SchemaNode>;
  required?: string[];
  additionalProperties?: boolean;
  items?: SchemaNode;
}

export const SCHEMA_PATH = join(__dirname, '..', 'schema', 'pipeline-config.schema.json');

function typeOf(v: unknown): string {
  if (Array.isArray(v)) return 'array';
  if (v === null) return 'null';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** Closest name by edit distance, for "did you mean" hints. */
function closest(name: string, options: string[]): string | undefined {
  const dist = (a: string, b: string) => {
    const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
    for (let j = 1; j <= b.length; j++) d[0]![j] = j;
    for (let i = 1; i <= a.length; i++)
      for (let j = 1; j <= b.length; j++)
        d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    return d[a.length]![b.length]!;
  };
  const best = options.map((o) => [o, dist(name.toLowerCase(), o.toLowerCase())] as const).sort((x, y) => x[1] - y[1])[0];
  return best && best[1] <= Math.max(2, Math.floor(name.length / 3)) ? best[0] : undefined;
}

export function checkSchema(value: unknown, node: SchemaNode, path: string, problems: { field: string; problem: string }[]): void {
  const field = path || '(file)';
  if (node.enum && !node.enum.includes(value)) {
    problems.push({ field, problem: `must be one of ${node.enum.map((e) => JSON.stringify(e)).join(', ')}, got ${JSON.stringify(value)}` });
    return;
  }
  const t = typeOf(value);
  if (node.type && !(node.type === t || (node.type === 'number' && t === 'integer'))) {
    problems.push({ field, problem: `must be ${node.type === 'integer' ? 'an integer' : `a${/^[aeiou]/.test(node.type) ? 'n' : ''} ${node.type}`}, got ${t === 'null' ? 'nothing' : `${t} ${JSON.stringify(value)}`}` });
    return;
  }
  if (t === 'object' && node.properties) {
    const obj = value as Record<string, unknown>;
    for (const r of node.required ?? []) {
      if (obj[r] === undefined) problems.push({ field: path ? `${path}.${r}` : r, problem: 'is required' });
    }
    for (const [k, v] of Object.entries(obj)) {
      const child = node.properties[k];
      const f = path ? `${path}.${k}` : k;
      if (!child) {
        // A field the pipeline definition no longer has: say it was removed, not that it is unknown.
        const removed = REMOVED_SETTINGS[f.replace(/^pipeline\./, '')];
        if (removed) problems.push({ field: f, problem: removed });
        else if (node.additionalProperties === false) {
          const hint = closest(k, Object.keys(node.properties));
          problems.push({ field: f, problem: `is not a known field${hint ? ` — did you mean '${hint}'?` : ''} (known: ${Object.keys(node.properties).join(', ')})` });
        }
        continue;
      }
      checkSchema(v, child, f, problems);
    }
  }
  if (t === 'array' && node.items) (value as unknown[]).forEach((v, i) => checkSchema(v, node.items!, `${path}[${i}]`, problems));
}

export interface PipelineConfig {
  spec: PipelineSpec;
  taskQueue: string;
  settings: Settings;
}

/**
 * Reads and validates a config file; throws ValidationError naming each bad field.
 * @param env - the environment its `connections` are written over (default: this process's, src/config.ts)
 */
export function loadPipelineConfig(file: string, env?: NodeJS.ProcessEnv): PipelineConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ValidationError(`config file ${file}`, [{ field: '(file)', problem: `cannot be read: ${(e as Error).message}` }]);
  }
  let raw: unknown;
  try {
    raw = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    throw new ValidationError(`config file ${file}`, [{ field: '(file)', problem: `is not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(e as Error).message.split('\n')[0]}` }]);
  }
  const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as SchemaNode;
  const problems: { field: string; problem: string }[] = [];
  checkSchema(raw, schema, '', problems);
  if (problems.length) throw new ValidationError(`config file ${file}`, problems);
  const cfg = raw as { pipeline: PipelineInput; taskQueue?: string; connections?: Record<string, unknown> };

  let spec: PipelineSpec;
  try {
    spec = definePipeline(cfg.pipeline);
  } catch (e) {
    if (e instanceof ValidationError) {
      throw new ValidationError(`config file ${file}`, e.problems.map((p) => ({ field: `pipeline.${p.field}`, problem: p.problem })));
    }
    throw e;
  }
  const settings = connectionSettings(cfg.connections, dirname(file), env);
  return { spec, taskQueue: cfg.taskQueue ?? settings.temporal.taskQueue, settings };
}
