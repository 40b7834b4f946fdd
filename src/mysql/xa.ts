/**
 * MySQL/MariaDB XA branches and the ledger.
 *
 * xid = (gtrid 'of:<pipeline>:<partition>:<epoch>', bqual '<attempt tag>', formatID 0x4f46).
 * The gtrid names the epoch so XA RECOVER finds an epoch's leftovers; the bqual differs per
 * attempt so a zombie attempt's branch is a different branch. XA statements take no
 * parameters, so xids are written as hex literals (never interpolated text).
 *
 * The ledger row (pipeline, partition, epoch) is written inside the same branch: its presence
 * is the truth about whether the MySQL side of an epoch committed (DESIGN §4).
 */
import type { Pool, PoolConnection, RowDataPacket } from 'mysql2/promise';

export const XA_FORMAT_ID = 0x4f46;
export const LEDGER_TABLE = 'onceflow_ledger';

export interface Xid {
  gtrid: string;
  bqual: string;
}

export const epochGtrid = (pipeline: string, partition: number, epoch: number) => `of:${pipeline}:${partition}:${epoch}`;
export const partitionGtridPrefix = (pipeline: string, partition: number) => `of:${pipeline}:${partition}:`;

/** Parses 'of:<pipeline>:<partition>:<epoch>'. */
export function parseGtrid(gtrid: string): { pipeline: string; partition: number; epoch: number } | null {
  const m = /^of:([a-z0-9._-]+):(\d+):(\d+)$/.exec(gtrid);
  if (!m) return null;
  return { pipeline: m[1]!, partition: Number(m[2]), epoch: Number(m[3]) };
}

export function xidSql(x: Xid): string {
  const hex = (s: string) => `X'${Buffer.from(s, 'utf8').toString('hex')}'`;
  return `${hex(x.gtrid)}, ${hex(x.bqual)}, ${XA_FORMAT_ID}`;
}

export const xidToString = (x: Xid) => `${x.gtrid}#${x.bqual}`;
export function xidFromString(s: string): Xid {
  const i = s.lastIndexOf('#');
  if (i < 0) throw new Error(`not an onceflow xid: ${s}`);
  return { gtrid: s.slice(0, i), bqual: s.slice(i + 1) };
}

export const ER_XAER_NOTA = 1397;
/** MariaDB answers XA ROLLBACK of a prepared branch that wrote nothing with XA_RBROLLBACK; the branch is gone. */
export const ER_XA_RBROLLBACK = 1402;
export const ER_XAER_RMFAIL = 1399;
export const ER_LOCK_WAIT_TIMEOUT = 1205;
export const ER_LOCK_DEADLOCK = 1213;
export const ER_DUP_ENTRY = 1062;
export const ER_NO_SUCH_TABLE = 1146;

export function sqlErrno(e: unknown): number | undefined {
  return typeof e === 'object' && e !== null && 'errno' in e ? Number((e as { errno: unknown }).errno) : undefined;
}

/** Prepared branches of ours (formatID and gtrid prefix match). */
export async function recoverXids(db: Pool | PoolConnection, gtridPrefix: string): Promise<Xid[]> {
  const [rows] = await db.query<RowDataPacket[]>({ sql: 'XA RECOVER', rowsAsArray: false });
  const out: Xid[] = [];
  for (const r of rows) {
    if (Number(r.formatID) !== XA_FORMAT_ID) continue;
    const data: Buffer = Buffer.isBuffer(r.data) ? r.data : Buffer.from(String(r.data), 'binary');
    const gl = Number(r.gtrid_length);
    const bl = Number(r.bqual_length);
    const gtrid = data.subarray(0, gl).toString('utf8');
    const bqual = data.subarray(gl, gl + bl).toString('utf8');
    if (gtrid.startsWith(gtridPrefix)) out.push({ gtrid, bqual });
  }
  return out;
}

export async function rollbackXid(db: Pool, x: Xid): Promise<'rolled-back' | 'gone'> {
  try {
    await db.query(`XA ROLLBACK ${xidSql(x)}`);
    return 'rolled-back';
  } catch (e) {
    if (sqlErrno(e) === ER_XAER_NOTA) return 'gone';
    if (sqlErrno(e) === ER_XA_RBROLLBACK) return 'rolled-back';
    throw e;
  }
}

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

/**
 * Runs `body` inside XA START … XA END, XA PREPARE on a dedicated connection, then detaches
 * the prepared branch by closing the connection: MariaDB and MySQL let another connection
 * XA COMMIT a prepared branch only once its session is gone. On any error before PREPARE the
 * branch is rolled back here; a crash leaves it to the next attempt's recovery.
 */
export async function prepareBranch(pool: Pool, xid: Xid, body: (conn: PoolConnection) => Promise<void>, hooks?: { afterPrepare?: () => Promise<void> | void }): Promise<void> {
  const conn = await pool.getConnection();
  let started = false;
  let prepared = false;
  try {
    await conn.query('SET SESSION innodb_lock_wait_timeout = 10');
    await conn.query(`XA START ${xidSql(xid)}`);
    started = true;
    await body(conn);
    await conn.query(`XA END ${xidSql(xid)}`);
    await conn.query(`XA PREPARE ${xidSql(xid)}`);
    prepared = true;
    await hooks?.afterPrepare?.();
  } catch (e) {
    if (started && !prepared) {
      await conn.query(`XA END ${xidSql(xid)}`).catch(() => undefined);
      await conn.query(`XA ROLLBACK ${xidSql(xid)}`).catch(() => undefined);
    }
    throw e;
  } finally {
    if (prepared) {
      // Detach the branch: end the session so any worker can XA COMMIT it.
      conn.destroy();
    } else conn.release();
  }
}

/**
 * XA COMMIT from any connection. Returns 'committed', 'already' (the ledger row shows it
 * committed earlier) or 'gone' (neither prepared nor committed: it was rolled back; the caller
 * redoes the MySQL side). A branch still attached to a live session is reported as retryable.
 */
export async function commitBranch(pool: Pool, xid: Xid, ledger: { pipeline: string; partition: number; epoch: number }): Promise<'committed' | 'already' | 'gone' | 'attached'> {
  try {
    await pool.query(`XA COMMIT ${xidSql(xid)}`);
    return 'committed';
  } catch (e) {
    if (sqlErrno(e) !== ER_XAER_NOTA) throw e;
  }
  // XAER_NOTA: either committed before, rolled back, or still attached to its preparing session.
  const listed = await recoverXids(pool, xid.gtrid);
  if (listed.some((x) => x.bqual === xid.bqual)) return 'attached';
  const row = await ledgerRow(pool, ledger.pipeline, ledger.partition, ledger.epoch);
  return row ? 'already' : 'gone';
}
