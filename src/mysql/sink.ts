/**
 * Row operations → upsert statements. Identifiers come from the validated pipeline definition
 * (IDENTIFIER_RE) and are checked again and quoted here, as are the column types of CREATE TABLE
 * (COLUMN_TYPE_RE); values are always parameters.
 *
 * MariaDB (what runs here) takes `col = col + VALUES(col)`; MySQL 8.0.20+ deprecates VALUES()
 * in ON DUPLICATE KEY UPDATE, so there the row alias form `AS new ... col = col + new.col` is used.
 */
import type { Pool, PoolConnection } from 'mysql2/promise';
import { COLUMN_TYPE_RE, IDENTIFIER_RE, type TableSpec } from '../spec';
import { ConfigError } from '../errors';
import { keyColumns, mergeIsExact, mergeRow, updatedColumns, versionProblem } from './table-mode';

export type SqlValue = string | number | bigint | null | Date | Buffer;

/** A value a transform may give a column: an SQL value, or a boolean, written as 1 or 0 (MySQL's BOOLEAN is TINYINT(1)). */
export type RowValue = SqlValue | boolean;

export interface RowOp {
  table: string;
  values: Record<string, RowValue>;
}

/** Row op values in `t`'s column order as SQL values: the one place a boolean becomes 1 or 0. */
export function rowValues(t: TableSpec, values: Record<string, RowValue>): SqlValue[] {
  return t.columns.map((c) => {
    const v = values[c] ?? null;
    return typeof v === 'boolean' ? (v ? 1 : 0) : v;
  });
}

export type Dialect = 'mariadb' | 'mysql';

export function quoteIdent(name: string): string {
  if (!IDENTIFIER_RE.test(name))
    throw new ConfigError('identifier', `'${name}' is not a plain SQL identifier (${IDENTIFIER_RE})`);
  return `\`${name}\``;
}

export async function detectDialect(db: Pool): Promise<Dialect> {
  const [rows] = await db.query('SELECT VERSION() AS v');
  const v = String((rows as { v: string }[])[0]?.v ?? '');
  return /mariadb/i.test(v) ? 'mariadb' : 'mysql';
}

/**
 * The `ON DUPLICATE KEY UPDATE …` clause of table t (its rule: src/mysql/table-mode.ts);
 * `incoming(c)` names the value being inserted for column c, `current(c)` the column as it is
 * in the table. 'newest': each updated column takes the incoming value only if the incoming
 * version is greater (a NULL version in the table counts as older than any), and the version
 * column is assigned last — MySQL and MariaDB evaluate the assignments left to right, later ones
 * seeing the values earlier ones set, so every condition compares with the version as it was.
 */
export function onDuplicateSql(
  t: TableSpec,
  incoming: (c: string) => string,
  current: (c: string) => string = quoteIdent,
): string {
  const od = t.onDuplicate;
  if (od.kind === 'ignore') return '';
  const newer =
    od.kind === 'newest' ? `(${current(od.version)} IS NULL OR ${incoming(od.version)} > ${current(od.version)})` : '';
  const sets = updatedColumns(t).map((c) =>
    od.kind === 'accumulate'
      ? `${current(c)} = ${current(c)} + ${incoming(c)}`
      : od.kind === 'newest'
        ? `${current(c)} = IF(${newer}, ${incoming(c)}, ${current(c)})`
        : `${current(c)} = ${incoming(c)}`,
  );
  return ` ON DUPLICATE KEY UPDATE ${sets.join(', ')}`;
}

/** INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE … for `rows` rows. */
export function upsertSql(t: TableSpec, rows: number, dialect: Dialect): string {
  const cols = t.columns.map(quoteIdent).join(', ');
  const tuple = `(${t.columns.map(() => '?').join(', ')})`;
  const values = Array.from({ length: rows }, () => tuple).join(', ');
  const ignore = t.onDuplicate.kind === 'ignore' ? ' IGNORE' : '';
  const incoming = (c: string) => (dialect === 'mysql' ? `new.${quoteIdent(c)}` : `VALUES(${quoteIdent(c)})`);
  const alias = dialect === 'mysql' && !ignore ? ' AS new' : '';
  return `INSERT${ignore} INTO ${quoteIdent(t.name)} (${cols}) VALUES ${values}${alias}${onDuplicateSql(t, incoming)}`;
}

/** A column definition of `create.columns`, checked here, where it becomes SQL text: the spec may come from a workflow's history unvalidated. */
function columnType(table: string, column: string, ty: string): string {
  if (!COLUMN_TYPE_RE.test(ty))
    throw new ConfigError(
      `create.columns.${column} of table '${table}'`,
      `is not a plain column type such as 'BIGINT NOT NULL' or 'DECIMAL(12, 2)' (words and numbers only, with one (n) or (n, m) after a word)`,
    );
  return ty;
}

export function createTableSql(t: TableSpec): string | null {
  if (!t.create) return null;
  const defs = Object.entries(t.create.columns).map(([c, ty]) => `${quoteIdent(c)} ${columnType(t.name, c, ty)}`);
  defs.push(`PRIMARY KEY (${t.create.primaryKey.map(quoteIdent).join(', ')})`);
  return `CREATE TABLE IF NOT EXISTS ${quoteIdent(t.name)} (${defs.join(', ')}) ENGINE=InnoDB`;
}

/**
 * Checks every row op against the table definitions; returns a problem text for a bad op
 * (so the record can be dead-lettered with the reason) or null.
 */
export function rowProblem(op: RowOp, tables: Map<string, TableSpec>): string | null {
  const t = tables.get(op.table);
  if (!t) return `row for unknown table '${op.table}' (defined: ${[...tables.keys()].join(', ') || 'none'})`;
  for (const c of t.columns) {
    if (!(c in op.values)) return `row for '${t.name}' lacks column '${c}'`;
  }
  for (const c of Object.keys(op.values)) {
    if (!t.columns.includes(c)) return `row for '${t.name}' has unknown column '${c}'`;
  }
  for (const c of t.columns) {
    const problem = valueProblem(op.values[c]);
    if (problem) return `row for '${t.name}': column '${c}' ${problem}`;
  }
  return versionProblem(t, op.values);
}

/**
 * Why `v` is not a RowValue, or null. Anything else would be bound by mysql2 in a shape of its
 * own (an array as a list, an object as `key = value` pairs) and would not survive the staged
 * rows' encoding (src/mysql/stage-codec.ts) the same way: refused per record.
 */
function valueProblem(v: unknown): string | null {
  if (v === null || typeof v === 'string' || typeof v === 'bigint' || typeof v === 'boolean' || Buffer.isBuffer(v))
    return null;
  if (typeof v === 'number') return Number.isFinite(v) ? null : `is ${v}, which no SQL column holds`;
  if (v instanceof Date) return Number.isFinite(v.getTime()) ? null : 'is an invalid Date';
  if (v === undefined) return 'is undefined (a missing field?); give null for SQL NULL';
  const what = Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`;
  return `is ${what}; give a string, number, bigint, boolean, Date, Buffer or null (JSON.stringify it for a JSON column)`;
}

const MAX_ROWS_PER_STATEMENT = 500;

const exactKey = (v: SqlValue): string | null => {
  if (v === null) return null; // NULLs never collide in a unique key: keep such rows apart
  if (typeof v === 'number') return `n${v}`;
  if (typeof v === 'bigint') return `b${v}`;
  if (typeof v === 'string') return `s${v}`;
  if (Buffer.isBuffer(v)) return `x${v.toString('hex')}`;
  return `d${v.getTime()}`;
};

/**
 * Combines the row ops of one batch that hit the same key into one row with the effect of
 * applying them in order, by the table's rule (mergeRow, src/mysql/table-mode.ts): 'accumulate'
 * sums (integers only, so the sum is exact), 'replace' keeps the last values, 'newest' the row
 * with the greatest version (the first of equal ones), 'ignore' the first row; columns not
 * updated keep the first row's values, as the INSERT of the first row would. Only keys whose
 * values are identical in JS are combined (a collation that folds more keys together still sees
 * them as separate rows of one statement, which MySQL applies in order). Returns the rows
 * unchanged where combining would not be exact (mergeIsExact; a key that includes an updated column).
 */
export function combineRows(t: TableSpec, rows: SqlValue[][]): SqlValue[][] {
  const keyIdx = keyColumns(t).map((c) => t.columns.indexOf(c));
  const updIdx = updatedColumns(t).map((c) => t.columns.indexOf(c));
  if (keyIdx.some((i) => i < 0 || updIdx.includes(i))) return rows;
  if (!mergeIsExact(t, rows)) return rows;
  const byKey = new Map<string, SqlValue[]>();
  const out: SqlValue[][] = [];
  for (const r of rows) {
    const parts = keyIdx.map((i) => exactKey(r[i] ?? null));
    if (parts.includes(null)) {
      out.push(r);
      continue;
    }
    const k = JSON.stringify(parts);
    const seen = byKey.get(k);
    if (!seen) {
      const copy = [...r];
      byKey.set(k, copy);
      out.push(copy);
    } else mergeRow(t, seen, r);
  }
  return out;
}

/**
 * Groups row ops by table, in a stable order (table, then column values), so concurrent epochs
 * of different partitions take row locks in the same order and rarely deadlock. Ops on the same
 * key are combined first (combineRows): fewer rows to write and to lock.
 */
export function tableRows(ops: RowOp[], tables: Map<string, TableSpec>): [TableSpec, SqlValue[][]][] {
  const byTable = new Map<string, SqlValue[][]>();
  for (const op of ops) {
    const t = tables.get(op.table)!;
    let list = byTable.get(t.name);
    if (!list) byTable.set(t.name, (list = []));
    list.push(rowValues(t, op.values));
  }
  return [...byTable.keys()].sort().map((name) => {
    const t = tables.get(name)!;
    return [t, combineRows(t, byTable.get(name)!).sort(compareRows)];
  });
}

/** Runs `statement(rowCount)` with the rows as parameters, in chunks of `perStatement` rows (MAX_ROWS_PER_STATEMENT). */
export async function insertChunked(
  conn: PoolConnection,
  rows: SqlValue[][],
  statement: (n: number) => string,
  prefix: (i: number) => SqlValue[] = () => [],
  perStatement = MAX_ROWS_PER_STATEMENT,
): Promise<void> {
  for (let i = 0; i < rows.length; i += perStatement) {
    const chunk = rows.slice(i, i + perStatement);
    await conn.query(
      statement(chunk.length),
      chunk.flatMap((r, k) => [...prefix(i + k), ...r]),
    );
  }
}

/** Upserts row ops into their tables (grouped, combined and ordered by tableRows). */
export async function writeRows(
  conn: PoolConnection,
  ops: RowOp[],
  tables: Map<string, TableSpec>,
  dialect: Dialect,
): Promise<void> {
  await writeTableRows(conn, tableRows(ops, tables), dialect);
}

/**
 * Upserts rows already grouped, combined and ordered by tableRows, table after table, in
 * statements of `perStatement` rows (MAX_ROWS_PER_STATEMENT).
 */
export async function writeTableRows(
  conn: PoolConnection,
  rows: [TableSpec, SqlValue[][]][],
  dialect: Dialect,
  perStatement = MAX_ROWS_PER_STATEMENT,
): Promise<void> {
  for (const [t, list] of rows)
    await insertChunked(conn, list, (n) => upsertSql(t, n, dialect), undefined, perStatement);
}

function compareRows(a: SqlValue[], b: SqlValue[]): number {
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (x === y) continue;
    if (x === null || x === undefined) return -1;
    if (y === null || y === undefined) return 1;
    if (typeof x === 'number' && typeof y === 'number') return x - y;
    const sx = String(x);
    const sy = String(y);
    if (sx !== sy) return sx < sy ? -1 : 1;
  }
  return 0;
}

/**
 * Runs `fn` in a local (non-XA) transaction on a pooled connection: commit on success, rollback
 * on error. `isolation` sets the level of this transaction only.
 */
export async function inLocalTransaction<T>(
  pool: Pool,
  fn: (conn: PoolConnection) => Promise<T>,
  isolation?: 'READ COMMITTED',
): Promise<T> {
  const conn = await pool.getConnection();
  try {
    if (isolation) await conn.query(`SET TRANSACTION ISOLATION LEVEL ${isolation}`);
    await conn.beginTransaction();
    const out = await fn(conn);
    await conn.commit();
    return out;
  } catch (e) {
    await conn.rollback().catch(() => undefined);
    throw e;
  } finally {
    conn.release();
  }
}
