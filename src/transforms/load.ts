/**
 * Loads user transforms from a module (`onceflow worker|verify|replay --transforms <module>`):
 * a .js module, or a .ts one when the process runs with tsx. The module exports `transforms`
 * (or a default export): a TransformRegistry, or a plain object mapping names to transforms.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError } from '../errors';
import { TransformRegistry, type Transform } from './registry';

const isTransform = (t: unknown): t is Transform => typeof t === 'object' && t !== null && typeof (t as Transform).map === 'function';

export function loadTransforms(modulePath: string, field = '--transforms'): TransformRegistry {
  const file = resolve(modulePath);
  if (!existsSync(file)) throw new ConfigError(field, `names '${modulePath}', which does not exist; give the path of a module that exports 'transforms'`);
  let mod: Record<string, unknown>;
  try {
    mod = require(file) as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(field, `module '${modulePath}' failed to load: ${e instanceof Error ? e.message : String(e)}`);
  }
  const exported = mod.transforms ?? mod.default;
  if (exported instanceof TransformRegistry) return exported;
  // A registry from another copy of onceflow (e.g. the user's own node_modules) is not `instanceof` ours.
  if (exported && typeof (exported as TransformRegistry).get === 'function' && typeof (exported as TransformRegistry).names === 'function') {
    const other = exported as TransformRegistry;
    return other.names().reduce((r, n) => r.register(n, other.get(n)), new TransformRegistry());
  }
  if (exported && typeof exported === 'object') {
    const entries = Object.entries(exported);
    const bad = entries.filter(([, t]) => !isTransform(t)).map(([n]) => n);
    if (entries.length && !bad.length) return entries.reduce((r, [n, t]) => r.register(n, t as Transform), new TransformRegistry());
    if (bad.length) throw new ConfigError(field, `module '${modulePath}': ${bad.map((b) => `'${b}'`).join(', ')} is not a transform (an object with a map(record, ctx) function)`);
  }
  throw new ConfigError(field, `module '${modulePath}' exports no 'transforms' (a TransformRegistry or a name → transform map)`);
}
