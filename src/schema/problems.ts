/**
 * From zod's issues to onceflow's problems: each names its field (`mysqlSink.tables[0].name`)
 * and says what to do. The schemas in this folder give their own text where a field has a rule
 * of its own; {@link describeIssue} words the rest (types, enums, missing fields), and unknown
 * fields get the closest known name of their object.
 */
import { z } from 'zod';
import { ValidationError } from '../errors';
import { REMOVED_SETTINGS } from '../spec';

interface Problem {
  field: string;
  problem: string;
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
  const best = options
    .map((o) => [o, dist(name.toLowerCase(), o.toLowerCase())] as const)
    .sort((x, y) => x[1] - y[1])[0];
  return best && best[1] <= Math.max(2, Math.floor(name.length / 3)) ? best[0] : undefined;
}

/** The value a problem was found in, as the text ends it: `got "x"`. */
export const got = (iss: { input?: unknown }) => JSON.stringify(iss.input);

/**
 * An object that refuses fields it does not know. Its one issue for all the unknown fields
 * carries a line per field (in `keys` order), which {@link problemsOf} gives each its own.
 */
export function strictObject<T extends z.core.$ZodLooseShape>(shape: T) {
  const known = Object.keys(shape);
  return z.strictObject(shape, {
    error: (iss) => {
      if (iss.code !== 'unrecognized_keys') return undefined;
      return iss.keys
        .map((k) => {
          const hint = closest(k, known);
          return `is not a known field${hint ? ` — did you mean '${hint}'?` : ''} (known: ${known.join(', ')})`;
        })
        .join('\n');
    },
  });
}

/**
 * Adds a problem found by a rule across fields (a `.check` of an object or array), at `path`
 * below it. It does not stop the checks of the objects around it, so one pass finds them all.
 */
export function flag(ctx: z.core.ParsePayload, path: PropertyKey[], input: unknown, message: string): void {
  ctx.issues.push({ code: 'custom', input, path, message, continue: true });
}

function typeOf(v: unknown): string {
  if (Array.isArray(v)) return 'array';
  if (v === null) return 'null';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** "must be an integer, got string "long"": a value of the wrong type (or none). */
export function typeProblem(expected: string, input: unknown): string {
  if (input === undefined) return 'is required';
  const t = typeOf(input);
  const what =
    expected === 'int'
      ? 'an integer'
      : `a${/^[aeiou]/.test(expected) ? 'n' : ''} ${expected === 'record' ? 'object' : expected}`;
  return `must be ${what}, got ${t === 'null' ? 'nothing' : `${t} ${JSON.stringify(input)}`}`;
}

const quoted = (vs: readonly unknown[]) => vs.map((v) => (typeof v === 'string' ? `'${v}'` : JSON.stringify(v)));

/** The words for issues whose schema gives none of its own (passed to every parse). */
const describeIssue: z.core.$ZodErrorMap = (iss) => {
  if (iss.code === 'invalid_type') return typeProblem(iss.expected, iss.input);
  if (iss.code === 'invalid_value') {
    const vs = quoted(iss.values);
    return `must be ${vs.length > 1 ? `${vs.slice(0, -1).join(', ')} or ${vs.at(-1)}` : vs[0]}, got ${got(iss)}`;
  }
  return undefined;
};

/** Words of a name that make it a secret's: apiToken, db_password, privateKey, clientSecret, passwordEnv, … */
const SECRET_WORDS = /^(pass(word|wd|phrase)?|secret|token|credentials?|apikey|privatekey)$/;

/** Whether a field or option name names a secret, by its words (camelCase, snake_case, kebab-case) and pairs of them. */
export function namesSecret(name: string): boolean {
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/);
  return [...words, ...words.slice(1).map((w, i) => words[i]! + w)].some((w) => SECRET_WORDS.test(w));
}

/** The issue's message, without the rejected value where it may be a secret: anything under `connections` (a DSN, a broker with user:password@) or in a secret-named field. */
function withoutSecret(iss: z.core.$ZodIssue, field: string): string {
  const input = (iss as { input?: unknown }).input;
  const secret = /^connections(\.|\[|$)/.test(field) || field.split(/[.[\]]/).some(namesSecret);
  if (input === undefined || !secret) return iss.message;
  const shown = JSON.stringify(input);
  return shown === undefined ? iss.message : iss.message.split(shown).join('(the value is not shown)');
}

/** `a.b[0].c` for the path ['a', 'b', 0, 'c']. */
function fieldPath(path: readonly PropertyKey[]): string {
  return path.map((k, i) => (typeof k === 'number' ? `[${k}]` : `${i ? '.' : ''}${String(k)}`)).join('');
}

/**
 * Each issue as a problem; `root` names the whole value (an issue with an empty path). A field the
 * pipeline definition no longer has is refused with the reason it was removed
 * (REMOVED_SETTINGS, keyed by its path in the definition: `pipelineAt` is where the definition
 * sits in the parsed value).
 */
function problemsOf(error: z.ZodError, root: string, pipelineAt = ''): Problem[] {
  return error.issues.flatMap((iss): Problem[] => {
    const field = fieldPath(iss.path);
    if (iss.code !== 'unrecognized_keys') return [{ field: field || root, problem: withoutSecret(iss, field) }];
    const lines = iss.message.split('\n');
    return iss.keys.map((k, n) => {
      const f = field ? `${field}.${k}` : k;
      const removed = f.startsWith(pipelineAt) ? REMOVED_SETTINGS[f.slice(pipelineAt.length)] : undefined;
      return { field: f, problem: removed ?? lines[n] ?? iss.message };
    });
  });
}

/**
 * `value` parsed by `schema`, or a ValidationError for `what` naming every problem (`root` and
 * `pipelineAt` as for {@link problemsOf}).
 */
export function validate<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
  root: string,
  pipelineAt = '',
): z.output<S> {
  const r = schema.safeParse(value, { error: describeIssue, reportInput: true });
  if (!r.success) throw new ValidationError(what, problemsOf(r.error, root, pipelineAt));
  return r.data;
}
