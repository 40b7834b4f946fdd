/**
 * The MySQL tables `onceflow verify` expects: every committed source record's row operations
 * applied once, by each table's rule (src/mysql/table-mode.ts, the one the sink follows), and
 * the comparison with what the tables hold.
 *
 * The rows of one source partition apply in record order, but partitions commit in an order
 * nothing fixes. So the model keeps, per key, each source partition's rows of the key combined
 * in record order, and accepts a table row that one order of commits could have left
 * (possibleRows): for 'replace' (last write wins) the updated columns of any partition's last
 * row of the key, for 'newest' those of the greatest version, for 'accumulate' the sum; the
 * other columns from any partition's first row. With one partition writing a key, exactly one
 * row is right.
 */
import type { Pool, RowDataPacket } from 'mysql2/promise';
import type { TableSpec } from '../spec';
import { quoteIdent, rowValues, type RowValue, type SqlValue } from './sink';
import { keyColumns, mergeRow, possibleRows } from './table-mode';

/** Key of a row (values in column order) as verify compares it: the key columns as text (values read back may differ in type from those written). */
const rowKey = (t: TableSpec, row: SqlValue[]) =>
  JSON.stringify(keyColumns(t).map((c) => String(row[t.columns.indexOf(c)])));

const same = (a: SqlValue[], b: SqlValue[]) => a.length === b.length && a.every((x, i) => String(x) === String(b[i]));
const show = (r: SqlValue[]) => `(${r.map(String).join(', ')})`;
const distinct = (rows: SqlValue[][]) => [...new Map(rows.map((r) => [JSON.stringify(r.map(String)), r])).values()];

export class ExpectedTables {
  /** table → key → source partition id → that partition's rows of the key, combined in record order. */
  private readonly tables = new Map<string, Map<string, Map<number, SqlValue[]>>>();

  /** Adds one row operation of source partition `partition`, in that partition's record order. */
  add(t: TableSpec, partition: number, values: Record<string, RowValue>): void {
    const keys = this.tables.get(t.name) ?? this.tables.set(t.name, new Map()).get(t.name)!;
    const incoming = rowValues(t, values);
    const k = rowKey(t, incoming);
    const byPartition = keys.get(k) ?? keys.set(k, new Map()).get(k)!;
    const existing = byPartition.get(partition);
    if (existing) mergeRow(t, existing, incoming);
    else byPartition.set(partition, incoming);
  }

  /** Rows expected, over every table. */
  get size(): number {
    return [...this.tables.values()].reduce((a, m) => a + m.size, 0);
  }

  /** What differs between the tables and the model, one line per row. */
  async compare(pool: Pool, tables: TableSpec[]): Promise<string[]> {
    const problems: string[] = [];
    for (const t of tables) {
      const expected = this.tables.get(t.name) ?? new Map<string, Map<number, SqlValue[]>>();
      const [rows] = await pool.query<RowDataPacket[]>(
        `SELECT ${t.columns.map(quoteIdent).join(', ')} FROM ${quoteIdent(t.name)}`,
      );
      const actual = new Map<string, SqlValue[]>();
      for (const r of rows) {
        const row = t.columns.map((c) => (r[c] as SqlValue) ?? null);
        actual.set(rowKey(t, row), row);
      }
      for (const [k, byPartition] of expected) {
        const a = actual.get(k);
        if (!a) {
          problems.push(`${t.name}: row ${k} missing`);
          continue;
        }
        const p = possibleRows(t, [...byPartition.values()]);
        p.updated = distinct(p.updated);
        p.kept = distinct(p.kept);
        const pick = (idx: number[]) => idx.map((i) => a[i] ?? null);
        const okUpdated = p.updated.some((u) => same(pick(p.updatedIdx), u));
        const okKept = p.kept.some((u) => same(pick(p.keptIdx), u));
        if (okUpdated && okKept) continue;
        if (p.updated.length === 1 && p.kept.length === 1) {
          const e = [...a];
          p.updatedIdx.forEach((i, n) => (e[i] = p.updated[0]![n] ?? null));
          p.keptIdx.forEach((i, n) => (e[i] = p.kept[0]![n] ?? null));
          problems.push(`${t.name}: row ${k} is ${show(a)}, expected ${show(e)}`);
        } else {
          const [idx, options] = okUpdated ? [p.keptIdx, p.kept] : [p.updatedIdx, p.updated];
          const cols = idx.map((i) => t.columns[i]).join(', ');
          problems.push(
            `${t.name}: row ${k} is ${show(a)}; its (${cols}) is ${show(pick(idx))}, which no order of its ${byPartition.size} source partitions' commits leaves: expected one of ${options.slice(0, 4).map(show).join(' | ')}`,
          );
        }
      }
      for (const k of actual.keys()) if (!expected.has(k)) problems.push(`${t.name}: unexpected row ${k}`);
    }
    return problems;
  }
}
