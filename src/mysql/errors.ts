/** MySQL/MariaDB error numbers onceflow acts on, and how to read one off a driver error. */

/** XA COMMIT/ROLLBACK of an xid the server does not know (or, on MariaDB, one still attached to its session). */
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
