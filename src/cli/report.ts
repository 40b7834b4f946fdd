/** `onceflow verify`, and its human-readable report (also used by the demo). */
import { pipelineSpecOf } from '../client';
import { verifyPipeline, type VerifyReport } from '../verify';
import { transformsOf } from '../worker';
import { withServices, type CommandContext } from './context';

export function printReport(r: VerifyReport, write: (s: string) => void = (s) => process.stdout.write(s)): void {
  const console = { log: (line: string) => write(`${line}\n`) };
  const t = r.totals;
  console.log(`\nverification of pipeline '${r.pipeline}'`);
  // Several source topics: a partition is named topic[partition] (its id is what workflow ids use).
  const several = new Set(r.partitions.map((p) => p.topic)).size > 1;
  const label = (p: VerifyReport['partitions'][number]) =>
    several ? `${p.topic}[${p.topicPartition}]` : String(p.partition);
  const width = Math.max(9, ...r.partitions.map((p) => label(p).length));
  console.log(
    `${'partition'.padStart(width)}  source-end  committed  epochs  expected  read_committed  read_uncommitted  dup  missing  dead-letters`,
  );
  for (const p of r.partitions) {
    console.log(
      [
        label(p).padStart(width),
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
  // Outputs that do not map one to one onto source partitions (a transform that picks the
  // partition, or a sink narrower than the source): the comparison per output partition.
  if (r.outputs.some((o) => o.sources.length !== 1 || o.sources[0] !== o.partition)) {
    console.log('output partition  from sources  expected  read_committed  dup  missing  unexpected  in order');
    for (const o of r.outputs) {
      console.log(
        [
          String(o.partition).padStart(16),
          (o.sources.join(',') || '-').padStart(12),
          String(o.expected).padStart(8),
          String(o.outputs).padStart(14),
          String(o.duplicates).padStart(3),
          String(o.missing).padStart(7),
          String(o.unexpected).padStart(10),
          (o.inOrder ? 'yes' : 'NO').padStart(8),
        ].join('  '),
      );
    }
  }
  console.log(
    `totals: source records ${t.sourceRecords}, read_committed outputs ${t.outputs}, duplicates ${t.duplicates}, missing ${t.missing}, ` +
      `dead letters ${t.deadLetters}, read_uncommitted outputs ${t.uncommittedOutputs} (aborted copies ${t.abortedCopies}), ` +
      `prepared XA branches ${t.preparedXaBranches}, partitions with hanging transactions ${t.hangingPartitions}`,
  );
  console.log(deadLetterLine(r.deadLetters));
  for (const c of r.checks) console.log(`  ${c.ok ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`);
  console.log(r.ok ? 'RESULT: exactly once — every check passed' : 'RESULT: FAILED');
}

/** The dead-letter line: the total, the allowance, and the count per reason class. Pure. */
export function deadLetterLine(d: VerifyReport['deadLetters']): string {
  const reasons = Object.entries(d.byReason).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  return `dead letters: ${d.total} (budget ${d.allowed})${reasons.length ? ` — ${reasons.map(([k, n]) => `${k} ${n}`).join(', ')}` : ''}`;
}

/** `onceflow verify <pipeline>`: exit 1 if a check fails. */
export function verifyCommand({ arg, o, settings, out, io, need }: CommandContext): Promise<number> {
  return withServices(settings, async (s) => {
    const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
    const report = await verifyPipeline(
      { ...s, transforms: transformsOf(settings) },
      spec,
      o.json ? undefined : (done, total, p) => io.stderr(`  verified ${p} (${done}/${total})\n`),
    );
    if (o.json) out('', report);
    else printReport(report, io.stdout);
    return report.ok ? 0 : 1;
  });
}
