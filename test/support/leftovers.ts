/**
 * Run by scripts/test.sh before the service tiers: names the XA branches of onceflow that are
 * prepared on the test stack's MariaDB before any test ran. A test that fails midway can leave
 * its pipeline's branch in doubt (nothing of that pipeline runs any more to decide it); the
 * suite runs on that stack next, so a failure then may come from the leftover rather than the
 * code, and this line says so. It only reports: deciding a branch is a pipeline's recovery's
 * or an operator's (`onceflow transactions --resolve`), not the test harness's.
 */
import { loadSettings } from '../../src/config';
import { openPool } from '../../src/connections';
import { recoverXids } from '../../src/mysql/branch';
import { xidToString } from '../../src/mysql/xid';

async function main(): Promise<void> {
  const pool = await openPool(loadSettings());
  try {
    const left = await recoverXids(pool, '');
    if (left.length === 0) return;
    console.log(
      `[test] ${left.length} onceflow XA branch(es) already prepared on this stack, left by an earlier run: ${left
        .slice(0, 10)
        .map(xidToString)
        .join(', ')}${left.length > 10 ? ', …' : ''}`,
    );
  } finally {
    await pool.end();
  }
}

main().catch((e: unknown) => {
  console.log(`[test] could not list prepared XA branches: ${e instanceof Error ? e.message : String(e)}`);
});
