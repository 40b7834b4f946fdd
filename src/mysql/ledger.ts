/**
 * The ledger: one row (pipeline, partition, epoch) written inside the epoch's XA branch. Its
 * presence is the truth about whether the MySQL side of an epoch committed.
 */
import type { Pool, PoolConnection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { StaleEpoch } from '../errors';

export const LEDGER_TABLE = 'onceflow_ledger';

/**
 * CREATE TABLE IF NOT EXISTS of an onceflow table keyed by the ledger's key (pipeline,
 * source_partition, epoch), then `more` key columns: the ledger, the claims and the staged rows
 * (src/mysql/stage.ts).
 */
export function epochKeyedTableSql(name: string, columns: string[], more: string[] = []): string {
  const key = ['pipeline', 'source_partition', 'epoch', ...more].join(', ');
  return `CREATE TABLE IF NOT EXISTS \`${name}\` (
    pipeline VARCHAR(64) NOT NULL,
    source_partition INT NOT NULL,
    epoch BIGINT NOT NULL,
    ${[...columns, `PRIMARY KEY (${key})`].join(',\n    ')}
  ) ENGINE=InnoDB`;
}

export async function ensureLedger(db: Pool): Promise<void> {
  await db.query(
    epochKeyedTableSql(LEDGER_TABLE, [
      'start_offset BIGINT NOT NULL',
      'end_offset BIGINT NOT NULL',
      'records INT NOT NULL',
      'redo TINYINT NOT NULL DEFAULT 0',
      'committed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)',
    ]),
  );
}

export interface LedgerRow {
  epoch: number;
  start: number;
  end: number;
  records: number;
  redo: boolean;
}

/** A partition's ledger row to insert: the epoch it is for and what it read. */
export type NewLedgerRow = LedgerRow & { partition: number };

/**
 * Inserts epochs' ledger rows, one per source partition (inside the epoch's XA branch or redo
 * transaction), in two statements whatever their number: a group epoch writes one row per
 * member. Refuses with StaleEpoch when a later epoch of one of the partitions is committed: the
 * row of an old epoch may have been pruned, so the primary key alone would no longer stop a
 * zombie attempt from writing it twice. Text statements with the values as parameters: the
 * branch's connection is new for every prepare (it is closed to detach the branch), and a
 * prepared statement would cost it one round trip more each.
 */
export async function insertLedgerRows(conn: PoolConnection, pipeline: string, rows: NewLedgerRow[]): Promise<void> {
  if (!rows.length) return;
  const [later] = await conn.query<RowDataPacket[]>(
    `SELECT source_partition AS p, MAX(epoch) AS e FROM \`${LEDGER_TABLE}\` WHERE pipeline = ? AND (${rows
      .map(() => '(source_partition = ? AND epoch > ?)')
      .join(' OR ')}) GROUP BY source_partition`,
    [pipeline, ...rows.flatMap((r) => [r.partition, r.epoch])],
  );
  for (const r of rows) {
    const stale = later.find((l) => Number(l.p) === r.partition);
    if (stale) throw new StaleEpoch(pipeline, r.partition, r.epoch, Number(stale.e));
  }
  await conn.query(
    `INSERT INTO \`${LEDGER_TABLE}\` (pipeline, source_partition, epoch, start_offset, end_offset, records, redo) VALUES ${rows
      .map(() => '(?, ?, ?, ?, ?, ?, ?)')
      .join(', ')}`,
    rows.flatMap((r) => [pipeline, r.partition, r.epoch, r.start, r.end, r.records, r.redo ? 1 : 0]),
  );
}

function toLedgerRow(r: RowDataPacket): LedgerRow {
  return {
    epoch: Number(r.epoch),
    start: Number(r.start_offset),
    end: Number(r.end_offset),
    records: Number(r.records),
    redo: Number(r.redo) === 1,
  };
}

export async function ledgerRow(
  db: Pool,
  pipeline: string,
  partition: number,
  epoch: number,
): Promise<LedgerRow | null> {
  const [rows] = await db.execute<RowDataPacket[]>(
    `SELECT epoch, start_offset, end_offset, records, redo FROM \`${LEDGER_TABLE}\` WHERE pipeline = ? AND source_partition = ? AND epoch = ?`,
    [pipeline, partition, epoch],
  );
  return rows[0] ? toLedgerRow(rows[0]) : null;
}

export async function lastLedgerRow(db: Pool, pipeline: string, partition: number): Promise<LedgerRow | null> {
  const [rows] = await db.execute<RowDataPacket[]>(
    `SELECT epoch, start_offset, end_offset, records, redo FROM \`${LEDGER_TABLE}\` WHERE pipeline = ? AND source_partition = ? ORDER BY epoch DESC LIMIT 1`,
    [pipeline, partition],
  );
  return rows[0] ? toLedgerRow(rows[0]) : null;
}

/**
 * What recovery needs of the ledger: the partition's last row (reconcile and `onceflow
 * transactions` compare it with the last progress marker, at most one epoch apart), the row of an
 * older epoch that still has a prepared branch or staged rows, and the first row (`onceflow
 * verify` checks the pipeline's output from its first offset on). Everything between is history.
 * The ledger keeps, per partition, the first row and the rows from epoch e - LEDGER_KEEP_EPOCHS
 * on, e being the committed epoch that last pruned; every LEDGER_PRUNE_EVERY-th commit deletes
 * the rest.
 */
export const LEDGER_KEEP_EPOCHS = 100;
export const LEDGER_PRUNE_EVERY = 100;

/** True when committing `epoch` should prune the partition's ledger. */
export const ledgerPruneDue = (epoch: number): boolean => epoch > 0 && epoch % LEDGER_PRUNE_EVERY === 0;

/**
 * Deletes the partition's rows older than the last LEDGER_KEEP_EPOCHS before `epoch` (a
 * committed epoch), except the first. Runs outside any XA branch; the range it locks ends
 * LEDGER_KEEP_EPOCHS below the epochs in flight, so it never waits on a prepared branch.
 * Returns the number of rows deleted.
 */
export async function pruneLedger(db: Pool, pipeline: string, partition: number, epoch: number): Promise<number> {
  const [first] = await db.execute<RowDataPacket[]>(
    `SELECT MIN(epoch) AS e FROM \`${LEDGER_TABLE}\` WHERE pipeline = ? AND source_partition = ?`,
    [pipeline, partition],
  );
  const firstEpoch = first[0]?.e;
  if (firstEpoch === null || firstEpoch === undefined) return 0;
  const [res] = await db.execute<ResultSetHeader>(
    `DELETE FROM \`${LEDGER_TABLE}\` WHERE pipeline = ? AND source_partition = ? AND epoch > ? AND epoch < ?`,
    [pipeline, partition, Number(firstEpoch), epoch - LEDGER_KEEP_EPOCHS],
  );
  return res.affectedRows;
}
