/**
 * Staged MySQL writes (mysqlSink.mode 'staged', the default).
 *
 * The XA branch of an epoch does not touch the target tables: it inserts the epoch's combined
 * rows into a staging table per target table, under keys private to (pipeline, partition,
 * epoch), a row (pipeline, partition, epoch) into onceflow_staged, and its ledger row. After
 * XA COMMIT, `applyStaged` moves them into the targets in one short local transaction: it claims
 * the epoch by deleting its onceflow_staged row, upserts the staged rows with INSERT … SELECT and
 * deletes them. The claim makes the apply happen once, however often it is retried or raced.
 * (A table of its own rather than a ledger column: no ALTER of the ledger, whose metadata lock
 * waits for every prepared branch.)
 *
 * Why: a prepared XA branch keeps its row locks until XA COMMIT, one Temporal round trip after
 * XA PREPARE. With direct writes every partition that upserts the same keys queues behind
 * those locks, and a branch left prepared by a crash blocks every writer of those keys until
 * recovery. Staged, a prepared branch locks only its own staging rows and ledger row; the target
 * rows are locked only for the apply (milliseconds). The cost is a second write of each row and
 * a short window in which the ledger shows an epoch committed whose rows are not yet in the
 * targets (the same commit activity closes it; reconcile closes it after a crash).
 */
import { createHash } from 'node:crypto';
import type { Pool, PoolConnection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import type { PipelineSpec, TableSpec } from '../spec';
import { inLocalTransaction, insertChunked, onDuplicateSql, quoteIdent, tableRows, type RowOp } from './sink';
import { ER_NO_SUCH_TABLE, sqlErrno } from './errors';
import { LEDGER_TABLE } from './ledger';
import { SOURCES_TABLE } from './sources';

export const STAGED_TABLE = 'onceflow_staged';

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
 * Creates the staging table of t if missing: the key columns, then t's columns with t's types
 * (CREATE … SELECT copies them), no other key. Must run after t exists. (The defaults only
 * satisfy strict mode for CREATE … SELECT; every staged row sets all four key columns.)
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

export async function ensureStagedTable(db: Pool): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS \`${STAGED_TABLE}\` (
    pipeline VARCHAR(64) NOT NULL,
    source_partition INT NOT NULL,
    epoch BIGINT NOT NULL,
    PRIMARY KEY (pipeline, source_partition, epoch)
  ) ENGINE=InnoDB`);
}

/**
 * Inside the XA branch: the epoch's rows into the staging tables and, if there were any, the
 * epoch into onceflow_staged. Returns how many rows were staged.
 */
export async function stageRows(
  conn: PoolConnection,
  at: { pipeline: string; partition: number; epoch: number },
  ops: RowOp[],
  tables: Map<string, TableSpec>,
): Promise<number> {
  let staged = 0;
  for (const [t, rows] of tableRows(ops, tables)) {
    const cols = [...KEY_COLUMNS, ...t.columns.map(quoteIdent)].join(', ');
    const tuple = `(${Array.from({ length: KEY_COLUMNS.length + t.columns.length }, () => '?').join(', ')})`;
    await insertChunked(
      conn,
      rows,
      (n) =>
        `INSERT INTO ${quoteIdent(stageTableName(t.name))} (${cols}) VALUES ${Array.from({ length: n }, () => tuple).join(', ')}`,
      (seq) => [at.pipeline, at.partition, at.epoch, seq],
    );
    staged += rows.length;
  }
  if (staged > 0)
    await conn.execute(`INSERT INTO \`${STAGED_TABLE}\` (pipeline, source_partition, epoch) VALUES (?, ?, ?)`, [
      at.pipeline,
      at.partition,
      at.epoch,
    ]);
  return staged;
}

/**
 * Moves a committed epoch's staged rows into the target tables, once. Returns false when there
 * was nothing to apply (applied before, or the epoch staged nothing). The transaction runs at
 * READ COMMITTED: the staged rows are read without gap locks, the target rows are locked only
 * until this transaction commits.
 */
export async function applyStaged(
  pool: Pool,
  at: { pipeline: string; partition: number; epoch: number },
  tables: TableSpec[],
): Promise<boolean> {
  const where = 'onceflow_pipeline = ? AND onceflow_partition = ? AND onceflow_epoch = ?';
  const params = [at.pipeline, at.partition, at.epoch];
  return inLocalTransaction(
    pool,
    async (conn) => {
      const [claim] = await conn.execute<ResultSetHeader>(
        `DELETE FROM \`${STAGED_TABLE}\` WHERE pipeline = ? AND source_partition = ? AND epoch = ?`,
        params,
      );
      if (claim.affectedRows === 0) return false;
      for (const t of [...tables].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
        const stage = quoteIdent(stageTableName(t.name));
        const target = quoteIdent(t.name);
        const ignore = t.onDuplicate.kind === 'ignore' ? ' IGNORE' : '';
        await conn.execute(
          `INSERT${ignore} INTO ${target} (${t.columns.map(quoteIdent).join(', ')}) SELECT ${t.columns.map((c) => `${stage}.${quoteIdent(c)}`).join(', ')} FROM ${stage} WHERE ${where} ORDER BY onceflow_seq` +
            onDuplicateSql(
              t,
              (c) => `${stage}.${quoteIdent(c)}`,
              (c) => `${target}.${quoteIdent(c)}`,
            ),
          params,
        );
        await conn.execute(`DELETE FROM ${stage} WHERE ${where}`, params);
      }
      return true;
    },
    'READ COMMITTED',
  );
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

/** Drops a pipeline's target and staging tables and deletes its ledger rows (test and benchmark resets). */
export async function dropPipelineTables(db: Pool, spec: PipelineSpec): Promise<void> {
  for (const t of spec.mysqlSink.tables) {
    await db.query(`DROP TABLE IF EXISTS ${quoteIdent(t.name)}, ${quoteIdent(stageTableName(t.name))}`);
  }
  // The source partition ids go with the ledger they key (src/mysql/sources.ts).
  for (const t of [LEDGER_TABLE, STAGED_TABLE, SOURCES_TABLE])
    await db.query(`DELETE FROM \`${t}\` WHERE pipeline = ?`, [spec.name]).catch(() => undefined);
}
