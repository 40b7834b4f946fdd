/**
 * Row operations → upsert statements. Identifiers come from the validated pipeline definition
 * (IDENTIFIER_RE) and are quoted; values are always parameters.
 *
 * MariaDB (what runs here) takes `col = col + VALUES(col)`; MySQL 8.0.20+ deprecates VALUES()
 * in ON DUPLICATE KEY UPDATE, so there the row alias form `AS new ... col = col + new.col` is used.
 */
import type { Pool, PoolConnection } from 'mysql2/promise';
import { IDENTIFIER_RE, type TableSpec } from '../spec';
import { ConfigError } from '../errors';

export type SqlValue = string | number | bigint | null | Date | Buffer;

export interface RowOp {
  table: string;
  values: Record<string, SqlValue>;
}

export type Dialect = 'mariadb' | 'mysql';

export function quoteIdent(name: string): string {
  if (!IDENTIFIER_RE.test(name)) throw new ConfigError('identifier', `'${name}' is not a plain SQL identifier (${IDENTIFIER_RE})`);
  return `\`${name}\``;
}

export async function detectDialect(db: Pool): Promise<Dialect> {
  const [rows] = await db.query('SELECT VERSION() AS v');
  const v = String((rows as { v: string }[])[0]?.v ?? '');
  return /mariadb/i.test(v) ? 'mariadb' : 'mysql';
}

/** INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE … for `rows` rows. */
export function upsertSql(t: TableSpec, rows: number, dialect: Dialect): string {
  const cols = t.columns.map(quoteIdent).join(', ');
  const tuple = `(${t.columns.map(() => '?').join(', ')})`;
  const values = Array.from({ length: rows }, () => tuple).join(', ');
  const od = t.onDuplicate;
  if (od.kind === 'ignore') return `INSERT IGNORE INTO ${quoteIdent(t.name)} (${cols}) VALUES ${values}`;
  const incoming = (c: string) => (dialect === 'mysql' ? `new.${quoteIdent(c)}` : `VALUES(${quoteIdent(c)})`);
  const sets = od.columns
    .map((c) => (od.kind === 'accumulate' ? `${quoteIdent(c)} = ${quoteIdent(c)} + ${incoming(c)}` : `${quoteIdent(c)} = ${incoming(c)}`))
    .join(', ');
  const alias = dialect === 'mysql' ? ' AS new' : '';
  return `INSERT INTO ${quoteIdent(t.name)} (${cols}) VALUES ${values}${alias} ON DUPLICATE KEY UPDATE ${sets}`;
}

export function createTableSql(t: TableSpec): string | null {
  if (!t.create) return null;
  const defs = Object.entries(t.create.columns).map(([c, ty]) => `${quoteIdent(c)} ${ty}`);
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
  return null;
}

const MAX_ROWS_PER_STATEMENT = 500;

/**
 * Writes row ops table by table, in a stable order (table, then column values), so concurrent
 * epochs of different partitions take row locks in the same order and rarely deadlock.
 */
export async function writeRows(conn: PoolConnection, ops: RowOp[], tables: Map<string, TableSpec>, dialect: Dialect): Promise<void> {
  const byTable = new Map<string, SqlValue[][]>();
  for (const op of ops) {
    const t = tables.get(op.table)!;
    let list = byTable.get(t.name);
    if (!list) byTable.set(t.name, (list = []));
    list.push(t.columns.map((c) => op.values[c] ?? null));
  }
  for (const name of [...byTable.keys()].sort()) {
    const t = tables.get(name)!;
    const rows = byTable.get(name)!;
    rows.sort(compareRows);
    for (let i = 0; i < rows.length; i += MAX_ROWS_PER_STATEMENT) {
      const chunk = rows.slice(i, i + MAX_ROWS_PER_STATEMENT);
      await conn.query(upsertSql(t, chunk.length, dialect), chunk.flat());
    }
  }
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
