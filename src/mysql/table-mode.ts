/**
 * How a row combines with the one already under its key (TableSpec.onDuplicate, docs/design.md
 * §6.16): the one rule that the sink's per-epoch combining (combineRows in ./sink), the SQL
 * (onDuplicateSql in ./sink) and verify's expected tables (./expected) follow.
 *
 *  - accumulate: the listed columns add up;
 *  - replace (overwrite): the listed columns take the incoming values — last write wins, so with
 *    several source partitions writing a key the result depends on which committed last;
 *  - newest: the listed columns and the version column take the incoming values only if the
 *    incoming version is strictly greater (equal keeps the row there), so the result does not
 *    depend on commit order; a row without a version is a bad record (rowProblem);
 *  - ignore (insert-only): the first row stays.
 * Columns not updated keep the values of the row first inserted.
 *
 * Pure module.
 */
import type { TableSpec } from '../spec';
import type { RowValue, SqlValue } from './sink';

/** The columns a duplicate key updates, in assignment order: for 'newest' the version column last. */
export function updatedColumns(t: TableSpec): string[] {
  const od = t.onDuplicate;
  if (od.kind === 'ignore') return [];
  if (od.kind === 'newest') return [...(od.columns ?? []).filter((c) => c !== od.version), od.version];
  return od.columns;
}

/** Key columns of a table for combining rows: the declared primary key, else the columns a duplicate does not update. */
export function keyColumns(t: TableSpec): string[] {
  const updated = updatedColumns(t);
  return t.create?.primaryKey ?? t.columns.filter((c) => !updated.includes(c));
}

/** Kind of a version value ('n' numbers and bigints, 'd' dates), or null for what cannot be one. */
function versionKind(v: unknown): 'n' | 'd' | null {
  if ((typeof v === 'number' && Number.isFinite(v)) || typeof v === 'bigint') return 'n';
  if (v instanceof Date && Number.isFinite(v.getTime())) return 'd';
  return null;
}

/**
 * Why a row of a 'newest' table cannot be compared (it goes to the dead-letter topic with this
 * reason), or null. A version is a number, a bigint or a Date: those compare in JS as MySQL
 * compares them in a numeric or DATETIME column (strings would compare by the column's collation).
 */
export function versionProblem(t: TableSpec, values: Record<string, RowValue>): string | null {
  const od = t.onDuplicate;
  if (od.kind !== 'newest') return null;
  const v = values[od.version];
  if (v === null || v === undefined)
    return `row for '${t.name}' has no version: column '${od.version}' is null (onDuplicate 'newest' compares versions; give every row one)`;
  if (!versionKind(v)) {
    return `row for '${t.name}' has version ${JSON.stringify(String(v)).slice(0, 60)} in column '${od.version}', which is not a number, a bigint or a Date; convert it in the transform (e.g. new Date(text) or Date.parse(text))`;
  }
  return null;
}

/** a > b: 1, a = b: 0, a < b: -1, for versions that passed versionProblem (dates as milliseconds). */
export function compareVersions(a: SqlValue, b: SqlValue): number {
  const x = a instanceof Date ? a.getTime() : (a as number | bigint);
  const y = b instanceof Date ? b.getTime() : (b as number | bigint);
  return x > y ? 1 : x < y ? -1 : 0;
}

const summable = (v: SqlValue): v is number | bigint =>
  (typeof v === 'number' && Number.isSafeInteger(v)) || typeof v === 'bigint';

/** a + b exactly for integers (bigint once a number sum would lose precision), else as numbers. */
function add(a: SqlValue, b: SqlValue): SqlValue {
  if (!summable(a) || !summable(b)) return Number(a) + Number(b);
  const sum = typeof a === 'bigint' || typeof b === 'bigint' ? BigInt(a) + BigInt(b) : a + b;
  return typeof sum === 'number' && !Number.isSafeInteger(sum) ? BigInt(a) + BigInt(b) : sum;
}

/**
 * Whether combining these rows in JS (mergeRow) gives exactly what MySQL would: accumulate only
 * integers (exact sums), newest only versions of one kind.
 */
export function mergeIsExact(t: TableSpec, rows: SqlValue[][]): boolean {
  const od = t.onDuplicate;
  if (od.kind === 'accumulate') {
    const idx = od.columns.map((c) => t.columns.indexOf(c));
    return rows.every((r) => idx.every((i) => summable(r[i] ?? null)));
  }
  if (od.kind === 'newest') {
    const i = t.columns.indexOf(od.version);
    return new Set(rows.map((r) => versionKind(r[i]))).size <= 1 && rows.every((r) => versionKind(r[i]) !== null);
  }
  return true;
}

/**
 * `existing` after `incoming` (same key, same column order as t.columns) is applied to it by the
 * table's rule; updates and returns `existing`.
 */
export function mergeRow(t: TableSpec, existing: SqlValue[], incoming: SqlValue[]): SqlValue[] {
  const od = t.onDuplicate;
  if (od.kind === 'ignore') return existing;
  if (od.kind === 'newest') {
    const v = t.columns.indexOf(od.version);
    if (compareVersions(incoming[v] ?? null, existing[v] ?? null) <= 0) return existing;
  }
  for (const c of updatedColumns(t)) {
    const i = t.columns.indexOf(c);
    existing[i] = od.kind === 'accumulate' ? add(existing[i] ?? null, incoming[i] ?? null) : (incoming[i] ?? null);
  }
  return existing;
}

/**
 * The rows a key may hold after every partition wrote it, from each source partition's rows of
 * the key combined in record order (mergeRow) — `perPartition`, at least one. Within a partition
 * the order is fixed; across partitions it is the order of their commits, which nothing fixes.
 * So: `updated` lists the possible values of the updated columns — accumulate: the sum (order
 * does not matter); replace: any partition's last (whichever committed last); newest: the
 * partition(s) holding the greatest version; ignore: none. `kept` lists the possible values of
 * the other columns — any partition's first row (whichever inserted first).
 */
export function possibleRows(
  t: TableSpec,
  perPartition: SqlValue[][],
): { updatedIdx: number[]; keptIdx: number[]; updated: SqlValue[][]; kept: SqlValue[][] } {
  const updatedIdx = updatedColumns(t).map((c) => t.columns.indexOf(c));
  const keptIdx = t.columns.map((_, i) => i).filter((i) => !updatedIdx.includes(i));
  const od = t.onDuplicate;
  let last: SqlValue[][];
  if (od.kind === 'accumulate')
    last = [perPartition.slice(1).reduce((acc, r) => mergeRow(t, acc, r), [...perPartition[0]!])];
  else if (od.kind === 'newest') {
    const v = t.columns.indexOf(od.version);
    const max = perPartition.reduce(
      (m, r) => (compareVersions(r[v] ?? null, m) > 0 ? (r[v] ?? null) : m),
      perPartition[0]![v] ?? null,
    );
    last = perPartition.filter((r) => compareVersions(r[v] ?? null, max) === 0);
  } else last = perPartition;
  return {
    updatedIdx,
    keptIdx,
    updated: last.map((r) => updatedIdx.map((i) => r[i] ?? null)),
    kept: perPartition.map((r) => keptIdx.map((i) => r[i] ?? null)),
  };
}
