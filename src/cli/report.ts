/** Human-readable verification report (used by the demo and the verify command). */
import type { VerifyReport } from '../verify';

export function printReport(r: VerifyReport, write: (s: string) => void = (s) => process.stdout.write(s)): void {
  const console = { log: (line: string) => write(`${line}\n`) };
  const t = r.totals;
  console.log(`\nverification of pipeline '${r.pipeline}'`);
  console.log('partition  source-end  committed  epochs  expected  read_committed  read_uncommitted  dup  missing  dead-letters');
  for (const p of r.partitions) {
    console.log(
      [
        String(p.partition).padStart(9),
        String(p.sourceEnd).padStart(10),
        String(p.committedThrough ?? '-').padStart(9),
        String(p.ledgerEpoch === null ? 0 : p.ledgerEpoch + 1).padStart(6),
        String(p.expectedOutputs).padStart(8),
        String(p.outputs).padStart(14),
        String(p.uncommittedOutputs).padStart(16),
        String(p.duplicates).padStart(3),
        String(p.missing + p.unexpected).padStart(7),
        String(p.deadLetters).padStart(12),
      ].join('  '),
    );
  }
  console.log(
    `totals: source records ${t.sourceRecords}, read_committed outputs ${t.outputs}, duplicates ${t.duplicates}, missing ${t.missing}, ` +
      `dead letters ${t.deadLetters}, read_uncommitted outputs ${t.uncommittedOutputs} (aborted copies ${t.abortedCopies}), ` +
      `prepared XA branches ${t.preparedXaBranches}, partitions with hanging transactions ${t.hangingPartitions}`,
  );
  for (const c of r.checks) console.log(`  ${c.ok ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`);
  console.log(r.ok ? 'RESULT: exactly once — every check passed' : 'RESULT: FAILED');
}
