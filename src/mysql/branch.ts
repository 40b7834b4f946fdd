/**
 * MySQL/MariaDB XA branches: prepare on a dedicated connection, commit or roll back from any
 * connection, list what is prepared. Xids: src/mysql/xid.ts; errors: src/mysql/errors.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolConnection, RowDataPacket } from 'mysql2/promise';
import { TransientError } from '../errors';
import { ER_LOCK_WAIT_TIMEOUT, ER_XAER_NOTA, ER_XA_RBROLLBACK, sqlErrno } from './errors';
import { ledgerRow } from './ledger';
import { XA_FORMAT_ID, xidSql, xidToString, type Xid } from './xid';

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

/**
 * XA COMMIT or XA ROLLBACK of `xid` from any connection: `done` when it succeeded (or answered an
 * errno of `alsoDone`), 'not-prepared' when the branch is no longer prepared. The one reading of
 * XAER_NOTA: MariaDB answers it alike for a branch no longer prepared (committed or rolled back)
 * and for one still attached to the session that prepared it, which XA RECOVER lists. That
 * session closes within milliseconds of XA PREPARE (prepareBranch ends it), so the statement is
 * tried again every 25 ms for up to 1 s while XA RECOVER lists the branch; then a TransientError
 * (an activity retries; `onceflow transactions --resolve` says to run again).
 */
async function endBranch<T extends string>(
  pool: Pool,
  xid: Xid,
  verb: 'COMMIT' | 'ROLLBACK',
  done: T,
  alsoDone: number[] = [],
): Promise<T | 'not-prepared'> {
  for (let i = 0; ; i++) {
    try {
      await pool.query(`XA ${verb} ${xidSql(xid)}`);
      return done;
    } catch (e) {
      if (alsoDone.includes(sqlErrno(e) ?? -1)) return done;
      if (sqlErrno(e) !== ER_XAER_NOTA) throw e;
    }
    const listed = await recoverXids(pool, xid.gtrid);
    if (!listed.some((x) => x.bqual === xid.bqual)) return 'not-prepared';
    if (i >= 40)
      throw new TransientError(
        `XA branch ${xidToString(xid)} is still attached to the session that prepared it (that worker's MySQL connection has not closed); try again shortly`,
      );
    await sleep(25);
  }
}

/** XA ROLLBACK from any connection: 'rolled-back', or 'gone' (no longer prepared: committed or rolled back before). */
export async function rollbackXid(pool: Pool, x: Xid): Promise<'rolled-back' | 'gone'> {
  const r = await endBranch(pool, x, 'ROLLBACK', 'rolled-back', [ER_XA_RBROLLBACK]);
  return r === 'not-prepared' ? 'gone' : r;
}

/**
 * How long a prepare's branch waits for a row lock (s). Staged writes (src/mysql/stage.ts) lock
 * only rows private to the epoch, so the only holder can be another attempt of the same epoch —
 * a stale one that woke after a freeze and prepared behind the current attempt's clean-up: fail
 * fast, and the retry rolls that older branch back (prepare's first step). Direct writes may
 * wait on another partition's prepared branch that is about to commit.
 */
export const LOCK_WAIT_SEC = { staged: 2, direct: 10 } as const;

/** An XA branch begun on a connection of its own (XA START), nothing written in it yet. */
export type StartedBranch = Promise<PoolConnection>;

/**
 * Takes a connection and starts the branch (XA START): what prepareBranch does first, split off
 * so a caller can do it while it waits for something else. A started branch holds no row lock
 * until its first write. Hand it to prepareBranch, or end it with dropBranch.
 */
export function startBranch(pool: Pool, xid: Xid, lockWaitSec: number = LOCK_WAIT_SEC.direct): StartedBranch {
  const started = (async () => {
    const conn = await pool.getConnection();
    try {
      await conn.query(`SET SESSION innodb_lock_wait_timeout = ${Math.max(1, Math.floor(lockWaitSec))}`);
      await conn.query(`XA START ${xidSql(xid)}`);
      return conn;
    } catch (e) {
      conn.destroy(); // its session's XA state is unknown: MariaDB rolls back whatever it began
      throw e;
    }
  })();
  started.catch(() => undefined); // awaited by prepareBranch or dropBranch
  return started;
}

/** Ends a started branch that will not be prepared: closing its session rolls it back. */
export async function dropBranch(started: StartedBranch): Promise<void> {
  const conn = await started.catch(() => undefined);
  conn?.destroy();
}

/**
 * Runs `body` inside XA START … XA END, XA PREPARE on a dedicated connection, then detaches
 * the prepared branch by closing the connection: MariaDB and MySQL let another connection
 * XA COMMIT a prepared branch only once its session is gone. On any error before PREPARE the
 * branch is rolled back here; a crash leaves it to the next attempt's recovery. `hooks.started`:
 * the branch startBranch began (else it is started here).
 */
export async function prepareBranch(
  pool: Pool,
  xid: Xid,
  body: (conn: PoolConnection) => Promise<void>,
  hooks?: { afterPrepare?: () => Promise<void> | void; lockWaitSec?: number; started?: StartedBranch },
): Promise<void> {
  const lockWaitSec = hooks?.lockWaitSec ?? LOCK_WAIT_SEC.direct;
  const conn = await (hooks?.started ?? startBranch(pool, xid, lockWaitSec));
  let prepared = false;
  try {
    await body(conn);
    await conn.query(`XA END ${xidSql(xid)}`);
    await conn.query(`XA PREPARE ${xidSql(xid)}`);
    prepared = true;
    await hooks?.afterPrepare?.();
  } catch (e) {
    if (!prepared) {
      await conn.query(`XA END ${xidSql(xid)}`).catch(() => undefined);
      await conn.query(`XA ROLLBACK ${xidSql(xid)}`).catch(() => undefined);
    }
    if (sqlErrno(e) === ER_LOCK_WAIT_TIMEOUT) {
      throw new TransientError(
        `XA branch ${xid.gtrid}: a row lock was not granted within ${lockWaitSec} s (held by another prepared branch, e.g. a stale attempt of this epoch); the retried attempt rolls back older branches first`,
        { cause: String(e) },
      );
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
 * redoes the MySQL side). A branch still attached to its preparing session: endBranch.
 */
export async function commitBranch(
  pool: Pool,
  xid: Xid,
  ledger: { pipeline: string; partition: number; epoch: number },
): Promise<'committed' | 'already' | 'gone'> {
  if ((await endBranch(pool, xid, 'COMMIT', 'committed')) === 'committed') return 'committed';
  // Not prepared any more: committed before (its ledger row is there) or rolled back.
  const row = await ledgerRow(pool, ledger.pipeline, ledger.partition, ledger.epoch);
  return row ? 'already' : 'gone';
}
