/**
 * Staged MySQL writes (mysqlSink.mode 'staged', the default).
 *
 * The XA branch of an epoch does not touch the target tables: it stores the epoch's combined
 * rows, encoded, in a few LONGBLOB rows of `onceflow_stage_rows` under a key private to
 * (pipeline, partition, epoch), a claim row (pipeline, partition, epoch) in onceflow_staged, and
 * its ledger row. After XA COMMIT, `applyStaged` moves the rows into the targets in one short
 * local transaction: it claims the epoch by deleting its onceflow_staged row, upserts the rows —
 * the statements B and direct mode use, with one statement per table and body (about 1 MiB)
 * instead of per 500 rows — and deletes the encoded copy. The claim makes the
 * apply happen once, however often it is retried or raced. The committing worker usually still
 * holds the rows it prepared (`rememberStaged`, keyed by the decided xid) and upserts them from
 * memory; any other reads them back. (Tables of their own rather than a ledger column: no ALTER
 * of the ledger, whose metadata lock waits for every prepared branch.)
 *
 * Why: a prepared XA branch keeps its row locks until XA COMMIT, one Temporal round trip after
 * XA PREPARE. With direct writes every partition that upserts the same keys queues behind
 * those locks, and a branch left prepared by a crash blocks every writer of those keys until
 * recovery. Staged, a prepared branch locks only its own staging rows and ledger row; the target
 * rows are locked only for the apply (milliseconds). The cost: the rows are written to the
 * target once, plus one encoded copy per epoch (a few large rows, not a row per row), and a
 * short window in which the ledger shows an epoch committed whose rows are not yet in the
 * targets (the same commit activity closes it; reconcile closes it after a crash).
 *
 * Runs of versions before the encoded copy staged row by row into `onceflow_stage_<table>`; an
 * apply that finds no encoded rows moves those (`applyRowStaged`), so an epoch staged by the old
 * code and committed by the new one is applied too.
 */
import { createHash } from 'node:crypto';
import type { Pool, PoolConnection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import type { PipelineSpec, TableSpec } from '../spec';
import {
  inLocalTransaction,
  onDuplicateSql,
  quoteIdent,
  tableRows,
  writeTableRows,
  type Dialect,
  type RowOp,
  type SqlValue,
} from './sink';
import { ER_NO_SUCH_TABLE, sqlErrno } from './errors';
import { epochKeyedTableSql } from './ledger';
import { decodeRows, encodeParts, type StagedRows } from './stage-codec';

export const STAGED_TABLE = 'onceflow_staged';
export const STAGE_ROWS_TABLE = 'onceflow_stage_rows';

const STAGE_PREFIX = 'onceflow_stage_';
const KEY_COLUMNS = ['onceflow_pipeline', 'onceflow_partition', 'onceflow_epoch', 'onceflow_seq'] as const;

export type MysqlMode = 'staged' | 'direct';

/**
 * The spec's MySQL mode. definePipeline always sets it (default 'staged'); a spec without it
 * comes from a run started before the option existed, whose start created no staging tables:
 * that run keeps writing directly until it is started again.
 */
export const mysqlMode = (spec: PipelineSpec): MysqlMode => spec.mysqlSink.mode ?? 'direct';

/** `onceflow_stage_<table>`, shortened with a hash where that would exceed MySQL's 64 characters. */
export function stageTableName(table: string): string {
  const name = `${STAGE_PREFIX}${table}`;
  if (name.length <= 64) return name;
  return `${STAGE_PREFIX}${table.slice(0, 40)}_${createHash('sha256').update(table).digest('hex').slice(0, 8)}`;
}

/**
 * Creates the row-by-row staging table of t if missing (the key columns, then t's columns with
 * t's types, copied by CREATE … SELECT; no other key). This version stages encoded rows instead;
 * the table is still made so a worker of the version before keeps working through a rolling
 * upgrade, and it fails with ER_NO_SUCH_TABLE where t does not exist, which setup reports. (The
 * defaults only satisfy strict mode for CREATE … SELECT; every staged row sets all four key columns.)
 */
export async function ensureStageTable(db: Pool, t: TableSpec): Promise<void> {
  const cols = t.columns.map(quoteIdent).join(', ');
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${quoteIdent(stageTableName(t.name))} (
      onceflow_pipeline VARCHAR(64) NOT NULL DEFAULT '',
      onceflow_partition INT NOT NULL DEFAULT 0,
      onceflow_epoch BIGINT NOT NULL DEFAULT 0,
      onceflow_seq INT NOT NULL DEFAULT 0,
      PRIMARY KEY (${KEY_COLUMNS.join(', ')})
    ) ENGINE=InnoDB SELECT ${cols} FROM ${quoteIdent(t.name)} WHERE 1 = 0`,
  );
}

/** The claim table and the encoded rows' table (both created if missing, never altered). */
export async function ensureStagedTable(db: Pool): Promise<void> {
  await db.query(epochKeyedTableSql(STAGED_TABLE, []));
  await db.query(epochKeyedTableSql(STAGE_ROWS_TABLE, ['seq INT NOT NULL', 'body LONGBLOB NOT NULL'], ['seq']));
}

const madeStageTables = new WeakMap<Pool, Promise<void>>();

/**
 * ensureStagedTable once per pool in this process, before the first staged epoch: a pipeline
 * started by a version before the encoded copy ran its setup without onceflow_stage_rows.
 */
export function ensureStagedTableOnce(db: Pool): Promise<void> {
  let made = madeStageTables.get(db);
  if (!made) {
    made = ensureStagedTable(db).catch((e: unknown) => {
      madeStageTables.delete(db);
      throw e;
    });
    madeStageTables.set(db, made);
  }
  return made;
}

/**
 * The rows this process staged, by xid and body (the rows of body seq at index seq), so the
 * worker that commits an epoch it prepared upserts them without reading them back. Bounded by
 * rows; what falls out is read back from the table.
 */
const remembered = new Map<string, StagedRows[]>();
let rememberedRows = 0;
const REMEMBER_ROWS = 400_000;
const rowCount = (bodies: StagedRows[]) => bodies.reduce((a, r) => a + r.reduce((b, [, l]) => b + l.length, 0), 0);

export function rememberStaged(xid: string, rows: StagedRows[]): void {
  if (rows.length === 0) return;
  remembered.set(xid, rows);
  rememberedRows += rowCount(rows);
  for (const [k, v] of remembered) {
    if (rememberedRows <= REMEMBER_ROWS) break;
    remembered.delete(k);
    rememberedRows -= rowCount(v);
  }
}

/** The rows staged under `xid` by this process, once (absent: prepared elsewhere, or long ago). */
export function takeStaged(xid: string): StagedRows[] | undefined {
  const r = remembered.get(xid);
  if (r) {
    remembered.delete(xid);
    rememberedRows -= rowCount(r);
  }
  return r;
}

/**
 * Inside the XA branch: the epoch's rows, encoded, into onceflow_stage_rows and, if there were
 * any, the epoch into onceflow_staged. Returns the rows as the apply will upsert them, body by
 * body (index = seq).
 */
export async function stageRows(
  conn: PoolConnection,
  at: { pipeline: string; partition: number; epoch: number },
  ops: RowOp[],
  tables: Map<string, TableSpec>,
): Promise<StagedRows[]> {
  const parts = encodeParts(tableRows(ops, tables));
  for (const [seq, { body }] of parts.entries())
    await conn.execute(
      `INSERT INTO \`${STAGE_ROWS_TABLE}\` (pipeline, source_partition, epoch, seq, body) VALUES (?, ?, ?, ?, ?)`,
      [at.pipeline, at.partition, at.epoch, seq, body],
    );
  if (parts.length > 0)
    await conn.execute(`INSERT INTO \`${STAGED_TABLE}\` (pipeline, source_partition, epoch) VALUES (?, ?, ?)`, [
      at.pipeline,
      at.partition,
      at.epoch,
    ]);
  return parts.map((p) => p.rows);
}

/**
 * Moves a committed epoch's staged rows into the target tables, once. Returns false when there
 * was nothing to apply (applied before, or the epoch staged nothing). `rows`: the epoch's rows
 * body by body as this process staged them (takeStaged), else they are read back. The
 * transaction runs at READ COMMITTED: the staged rows are read without gap locks, the target
 * rows are locked only until this transaction commits. Each body's rows of a table go in one
 * statement: every statement is a round trip that waits its turn on the worker's event loop,
 * and the target rows stay locked meanwhile (500-row statements made the apply of a
 * 17,857-row epoch 1.1 s, with waits of other partitions' applies behind it, against 0.5 s).
 */
export async function applyStaged(
  pool: Pool,
  at: { pipeline: string; partition: number; epoch: number },
  tables: TableSpec[],
  dialect: Dialect,
  rows?: StagedRows[],
): Promise<boolean> {
  const params = [at.pipeline, at.partition, at.epoch];
  const where = 'pipeline = ? AND source_partition = ? AND epoch = ?';
  return inLocalTransaction(
    pool,
    async (conn) => {
      const [claim] = await conn.execute<ResultSetHeader>(`DELETE FROM \`${STAGED_TABLE}\` WHERE ${where}`, params);
      if (claim.affectedRows === 0) return false;
      let staged = rows;
      if (!staged) {
        const found = await conn
          .execute<RowDataPacket[]>(`SELECT body FROM \`${STAGE_ROWS_TABLE}\` WHERE ${where} ORDER BY seq`, params)
          .then(
            ([r]) => r,
            (e: unknown) => {
              // Not made yet: a pipeline started by a version before the encoded copy.
              if (sqlErrno(e) === ER_NO_SUCH_TABLE) return [];
              throw e;
            },
          );
        if (found.length === 0) {
          // Staged row by row by a version before the encoded copy.
          await applyRowStaged(conn, params, tables);
          return true;
        }
        staged = found.map((r) => decodeRows([r.body as Buffer], tables));
      }
      for (const body of staged) await writeTableRows(conn, body, dialect, Infinity);
      await conn.execute(`DELETE FROM \`${STAGE_ROWS_TABLE}\` WHERE ${where}`, params);
      return true;
    },
    'READ COMMITTED',
  );
}

/**
 * A pipeline's epoch apply: its staged rows into the tables if the pipeline stages (applyStaged),
 * nothing with direct writes. The one entry for the commit, reconcile and `onceflow transactions`.
 */
export async function applyPipelineEpoch(
  pool: Pool,
  spec: PipelineSpec,
  partition: number,
  epoch: number,
  dialect: Dialect,
  rows?: StagedRows[],
): Promise<boolean> {
  if (mysqlMode(spec) !== 'staged') return false;
  return applyStaged(pool, { pipeline: spec.name, partition, epoch }, spec.mysqlSink.tables, dialect, rows);
}

/**
 * The apply of an epoch staged row by row into `onceflow_stage_<table>` (versions before the
 * encoded copy): INSERT … SELECT, then the staged rows deleted. A staging table that does not
 * exist staged nothing.
 */
async function applyRowStaged(conn: PoolConnection, params: SqlValue[], tables: TableSpec[]): Promise<void> {
  const where = 'onceflow_pipeline = ? AND onceflow_partition = ? AND onceflow_epoch = ?';
  for (const t of [...tables].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    const stage = quoteIdent(stageTableName(t.name));
    const target = quoteIdent(t.name);
    const ignore = t.onDuplicate.kind === 'ignore' ? ' IGNORE' : '';
    try {
      await conn.execute(
        `INSERT${ignore} INTO ${target} (${t.columns.map(quoteIdent).join(', ')}) SELECT ${t.columns.map((c) => `${stage}.${quoteIdent(c)}`).join(', ')} FROM ${stage} WHERE ${where} ORDER BY onceflow_seq` +
          onDuplicateSql(
            t,
            (c) => `${stage}.${quoteIdent(c)}`,
            (c) => `${target}.${quoteIdent(c)}`,
          ),
        params,
      );
    } catch (e) {
      if (sqlErrno(e) === ER_NO_SUCH_TABLE) continue;
      throw e;
    }
    await conn.execute(`DELETE FROM ${stage} WHERE ${where}`, params);
  }
}

/**
 * Epochs of a partition whose XA branch committed but whose staged rows are not applied yet, in
 * order. None where onceflow_staged does not exist (no pipeline ever staged rows in this database).
 */
export async function pendingEpochs(
  db: Pool,
  pipeline: string,
  partition?: number,
): Promise<{ partition: number; epoch: number }[]> {
  try {
    const [rows] = await db.execute<RowDataPacket[]>(
      `SELECT source_partition, epoch FROM \`${STAGED_TABLE}\` WHERE pipeline = ?${partition === undefined ? '' : ' AND source_partition = ?'} ORDER BY source_partition, epoch`,
      partition === undefined ? [pipeline] : [pipeline, partition],
    );
    return rows.map((r) => ({ partition: Number(r.source_partition), epoch: Number(r.epoch) }));
  } catch (e) {
    if (sqlErrno(e) === ER_NO_SUCH_TABLE) return [];
    throw e;
  }
}
