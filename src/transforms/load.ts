/**
 * Loads user transforms from a module (`onceflow worker|run|verify --transforms <module>`):
 * a .js module, or a .ts one through tsx (the user's own, or the one next to onceflow). The
 * module exports `transforms` (or a default export): a TransformRegistry, or a plain object
 * mapping names to transforms.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { ConfigError } from '../errors';
import { TransformRegistry, type Transform } from './registry';

const isTransform = (t: unknown): t is Transform =>
  typeof t === 'object' && t !== null && typeof (t as Transform).map === 'function';

/** Makes require() understand TypeScript, with tsx from the module's project or from onceflow's. */
function registerTypeScript(file: string, field: string, modulePath: string): void {
  if (require.extensions['.ts']) return; // already running under tsx
  for (const from of [file, __filename]) {
    try {
      (createRequire(from)('tsx/cjs/api') as { register(): unknown }).register();
      return;
    } catch {
      // not installed there; try the next place
    }
  }
  throw new ConfigError(
    field,
    `'${modulePath}' is TypeScript, and tsx is not installed in its project: run 'npm install --save-dev tsx' there, or compile the module and give the .js file`,
  );
}

export function loadTransforms(modulePath: string, field = '--transforms'): TransformRegistry {
  const file = resolve(modulePath);
  if (!existsSync(file))
    throw new ConfigError(
      field,
      `names '${modulePath}', which does not exist; give the path of a module that exports 'transforms'`,
    );
  if (/\.[cm]?ts$/.test(file)) registerTypeScript(file, field, modulePath);
  let mod: Record<string, unknown>;
  try {
    mod = require(file) as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(
      field,
      `module '${modulePath}' failed to load: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
  const exported = mod.transforms ?? mod.default;
  if (exported instanceof TransformRegistry) return exported;
  // A registry from another copy of onceflow (e.g. the user's own node_modules) is not `instanceof` ours.
  if (
    exported &&
    typeof (exported as TransformRegistry).get === 'function' &&
    typeof (exported as TransformRegistry).names === 'function'
  ) {
    const other = exported as TransformRegistry;
    return other.names().reduce((r, n) => r.register(n, other.get(n)), new TransformRegistry());
  }
  if (exported && typeof exported === 'object') {
    const entries = Object.entries(exported);
    const bad = entries.filter(([, t]) => !isTransform(t)).map(([n]) => n);
    if (entries.length && !bad.length)
      return entries.reduce((r, [n, t]) => r.register(n, t as Transform), new TransformRegistry());
    if (bad.length)
      throw new ConfigError(
        field,
        `module '${modulePath}': ${bad.map((b) => `'${b}'`).join(', ')} is not a transform (an object with a map(record, ctx) function)`,
      );
  }
  throw new ConfigError(
    field,
    `module '${modulePath}' exports no 'transforms' (a TransformRegistry or a name → transform map)`,
  );
}
