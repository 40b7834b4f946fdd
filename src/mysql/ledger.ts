/**
 * The ledger: one row (pipeline, partition, epoch) written inside the epoch's XA branch. Its
 * presence is the truth about whether the MySQL side of an epoch committed.
 */
import type { Pool, PoolConnection, RowDataPacket } from 'mysql2/promise';

export const LEDGER_TABLE = 'onceflow_ledger';

export async function ensureLedger(db: Pool): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS \`${LEDGER_TABLE}\` (
    pipeline VARCHAR(64) NOT NULL,
    source_partition INT NOT NULL,
    epoch BIGINT NOT NULL,
    start_offset BIGINT NOT NULL,
    end_offset BIGINT NOT NULL,
    records INT NOT NULL,
    redo TINYINT NOT NULL DEFAULT 0,
    committed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (pipeline, source_partition, epoch)
  ) ENGINE=InnoDB`);
}

export interface LedgerRow {
  epoch: number;
  start: number;
  end: number;
  records: number;
  redo: boolean;
}

export async function insertLedger(
  conn: PoolConnection,
  pipeline: string,
  partition: number,
  row: { epoch: number; start: number; end: number; records: number; redo: boolean },
): Promise<void> {
  await conn.execute(
    `INSERT INTO \`${LEDGER_TABLE}\` (pipeline, source_partition, epoch, start_offset, end_offset, records, redo) VALUES (?, ?, ?, ?, ?, ?, ?)`,
    [pipeline, partition, row.epoch, row.start, row.end, row.records, row.redo ? 1 : 0],
  );
}

function toLedgerRow(r: RowDataPacket): LedgerRow {
  return { epoch: Number(r.epoch), start: Number(r.start_offset), end: Number(r.end_offset), records: Number(r.records), redo: Number(r.redo) === 1 };
}

export async function ledgerRow(db: Pool, pipeline: string, partition: number, epoch: number): Promise<LedgerRow | null> {
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
