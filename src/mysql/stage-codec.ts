/**
 * The encoded copy of an epoch's staged rows (src/mysql/stage.ts): rows as JSON that decodes to
 * the same SQL values, cut into bodies of about 1 MiB for LONGBLOB rows.
 */
import type { TableSpec } from '../spec';
import type { SqlValue } from './sink';

/** An epoch's rows as the apply upserts them: per table, combined and in lock order (tableRows). */
export type StagedRows = [TableSpec, SqlValue[][]][];

/**
 * Bytes of encoded rows per LONGBLOB row, and so per upsert statement of the apply (one per
 * table of a body, src/mysql/stage.ts): as SQL text at most about 1.6 MiB (a Buffer is base64
 * here, hex there), below every server's max_allowed_packet (MySQL 5.7's 4 MiB).
 */
const BODY_BYTES = 1 << 20;

/**
 * One value as JSON that decodes to the same SqlValue: strings, finite numbers and null as
 * themselves; bigint, Date and Buffer tagged (a plain object is never a SqlValue). A number
 * JSON cannot hold (NaN, ±Infinity) has no SQL value either: refused, never turned into NULL.
 */
const encodeValue = (v: SqlValue): unknown => {
  if (typeof v === 'number' && !Number.isFinite(v))
    throw new Error(`a row value is ${v}, which no SQL column holds; the transform must emit finite numbers`);
  return typeof v === 'bigint'
    ? { n: v.toString() }
    : v instanceof Date
      ? { d: v.getTime() }
      : Buffer.isBuffer(v)
        ? { x: v.toString('base64') }
        : v;
};

const decodeValue = (v: unknown): SqlValue => {
  if (v === null || typeof v === 'string' || typeof v === 'number') return v;
  const o = v as { n?: string; d?: number; x?: string };
  if (o.n !== undefined) return BigInt(o.n);
  if (o.d !== undefined) return new Date(o.d);
  if (o.x !== undefined) return Buffer.from(o.x, 'base64');
  throw new Error(`staged rows: a value of unknown shape ${JSON.stringify(v)}`);
};

/**
 * An epoch's rows as bodies of at most about BODY_BYTES each: every body a JSON array of
 * [table, rows] with whole rows, tables and rows in their order; with each body, the rows it
 * holds (the same arrays, not copies).
 */
export function encodeParts(rows: StagedRows): { body: Buffer; rows: StagedRows }[] {
  const parts: { body: Buffer; rows: StagedRows }[] = [];
  // Each row is stringified once; a body is the rows' JSON joined into [[table, [row, …]], …].
  let part: [TableSpec, string[], SqlValue[][]][] = [];
  let bytes = 0;
  const flush = () => {
    if (part.length)
      parts.push({
        body: Buffer.from(`[${part.map(([t, rs]) => `[${JSON.stringify(t.name)},[${rs.join(',')}]]`).join(',')}]`),
        rows: part.map(([t, , values]) => [t, values]),
      });
    part = [];
    bytes = 0;
  };
  for (const [t, list] of rows) {
    let current: [TableSpec, string[], SqlValue[][]] | undefined;
    for (const r of list) {
      const row = JSON.stringify(r.map(encodeValue));
      if (bytes > 0 && bytes + row.length + 1 > BODY_BYTES) {
        flush();
        current = undefined;
      }
      if (!current) part.push((current = [t, [], []]));
      current[1].push(row);
      current[2].push(r);
      bytes += row.length + 1;
    }
  }
  flush();
  return parts;
}

/** The rows of `bodies` (in seq order) for the pipeline's tables; a table it no longer has is an error naming it. */
export function decodeRows(bodies: Buffer[], tables: TableSpec[]): StagedRows {
  const byName = new Map(tables.map((t) => [t.name, t]));
  const out: StagedRows = [];
  for (const b of bodies) {
    for (const [name, list] of JSON.parse(b.toString('utf8')) as [string, unknown[][]][]) {
      const t = byName.get(name);
      if (!t)
        throw new Error(
          `staged rows for table '${name}', which the pipeline definition no longer has; restore it in mysqlSink.tables until the pipeline's staged epochs are applied (onceflow transactions)`,
        );
      const rows = list.map((r) => r.map(decodeValue));
      const last = out[out.length - 1];
      if (last && last[0] === t) last[1].push(...rows);
      else out.push([t, rows]);
    }
  }
  return out;
}
