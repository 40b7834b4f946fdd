/**
 * Verify's checks: what was found (src/verify/read.ts) against what the run must have written
 * (src/verify/expected.ts) — duplicates, missing and unexpected records as multisets, source
 * order, the dead-letter budget — and the report's totals and verdicts. Pure.
 */
import type { RawRecord } from '../kafka/internals';
import { budgetOf, deadLettersAllowed } from '../activities/budget';
import { xidToString, type Xid } from '../mysql/xid';
import { sourceTopics, type PipelineSpec } from '../spec';
import type { Check, DeadLetterSummary, OutputReport, PartitionReport, VerifyReport } from './types';

export const fingerprint = (key: Buffer | string | null | undefined, value: Buffer | string | null) =>
  `${key == null ? '' : Buffer.from(key).toString('base64')}:${value == null ? '' : Buffer.from(value).toString('base64')}`;

export function compare(expected: string[], actual: string[]) {
  const counts = new Map<string, number>();
  for (const e of expected) counts.set(e, (counts.get(e) ?? 0) + 1);
  let duplicates = 0;
  let unexpected = 0;
  for (const a of actual) {
    const c = counts.get(a);
    if (c === undefined) unexpected++;
    else if (c <= 0) duplicates++;
    counts.set(a, (c ?? 0) - 1);
  }
  let missing = 0;
  for (const c of counts.values()) if (c > 0) missing += c;
  const inOrder = expected.length === actual.length && expected.every((e, i) => e === actual[i]);
  return { duplicates, missing, unexpected, inOrder };
}

/** Whether each source partition's expected outputs appear in its order among `actual` (fingerprints shared by several sources are not judged). */
function inSourceOrder(expectedBySource: Map<number, string[]>, actual: string[]): Map<number, boolean> {
  const owners = new Map<string, Set<number>>();
  for (const [id, fps] of expectedBySource)
    for (const fp of fps) (owners.get(fp) ?? owners.set(fp, new Set()).get(fp)!).add(id);
  const out = new Map<number, boolean>();
  for (const [id, fps] of expectedBySource) {
    const mine = (fp: string) => owners.get(fp)?.size === 1 && owners.get(fp)!.has(id);
    const e = fps.filter(mine);
    const a = actual.filter(mine);
    out.set(id, e.length === a.length && e.every((x, i) => x === a[i]));
  }
  return out;
}

/**
 * One output partition: expected vs read_committed as multisets, and each source's order. What
 * was found is also attributed to the source partitions, for their rows of the report (`reportOf`, updated).
 */
export function judgeOutput(
  partition: number,
  bySource: Map<number, string[]>,
  committed: string[],
  uncommitted: number,
  reportOf: Map<number, PartitionReport>,
): OutputReport {
  const expected = [...bySource.values()].flat();
  const cmp = compare(expected.slice().sort(), committed.slice().sort());
  const order = inSourceOrder(bySource, committed);
  const left = new Map<string, number>();
  for (const fp of committed) left.set(fp, (left.get(fp) ?? 0) + 1);
  for (const [id, fps] of [...bySource].sort((a, b) => a[0] - b[0])) {
    const r = reportOf.get(id)!;
    for (const fp of fps) {
      const n = left.get(fp) ?? 0;
      if (n > 0) {
        left.set(fp, n - 1);
        r.outputs++;
      } else r.missing++;
    }
    r.uncommittedOutputs += uncommitted;
    if (!order.get(id)) r.inOrder = false;
  }
  return {
    partition,
    sources: [...bySource.keys()].sort((a, b) => a - b),
    expected: expected.length,
    outputs: committed.length,
    uncommittedOutputs: uncommitted,
    duplicates: cmp.duplicates,
    missing: cmp.missing,
    unexpected: cmp.unexpected,
    inOrder: [...order.values()].every(Boolean),
  };
}

/** Reason class of a dead letter: its onceflow.reason header, else (older runs) the error text before its first ':'. */
const reasonOf = (headers: RawRecord['headers']) =>
  headers['onceflow.reason'] !== undefined
    ? String(headers['onceflow.reason'])
    : String(headers['onceflow.error'] ?? 'unknown')
        .split(':')[0]!
        .trim();

/** Counts the run's dead letters per reason and the budget's allowance for the run's source records. */
export function deadLetterSummary(
  spec: PipelineSpec,
  records: Pick<RawRecord, 'headers'>[],
  sourceRecords: number,
): DeadLetterSummary {
  const byReason: Record<string, number> = {};
  for (const r of records) {
    const k = reasonOf(r.headers);
    byReason[k] = (byReason[k] ?? 0) + 1;
  }
  const budget = budgetOf(spec);
  return {
    total: records.length,
    byReason,
    allowed: deadLettersAllowed(budget, sourceRecords, 'run'),
    maxRatio: budget.maxRatio,
  };
}

/** The check that fails a run whose dead letters exceed the budget. Pure. */
export function budgetCheck(d: DeadLetterSummary, sourceRecords: number): Check {
  return {
    name: 'dead letters within the budget',
    ok: d.total <= d.allowed,
    detail: `${d.total} of ${sourceRecords} source records, at most ${d.allowed} allowed (deadLetter.maxRatio ${d.maxRatio})${d.total > d.allowed ? ': the transform rejects more records than the pipeline allows; fix it, or raise pipeline.deadLetter' : ''}`,
  };
}

/** Everything the checks judge: the report rows, what was found, and the dead letters compared by source coordinates. */
export interface Findings {
  reports: PartitionReport[];
  outputs: OutputReport[];
  outputPartitions: number;
  sourceRecords: number;
  deadLetterSources: string[];
  deadLetterCmp: ReturnType<typeof compare>;
  deadLetters: DeadLetterSummary;
  goneTopics: string[];
  unread: string[];
  hangingWhere: string[];
  prepared: Xid[];
  unapplied: { partition: number; epoch: number }[];
  tableProblems: string[];
  expectedRows: number;
}

export function totalsOf(f: Findings): VerifyReport['totals'] {
  const sumOut = (g: (r: OutputReport) => number) => f.outputs.reduce((a, r) => a + g(r), 0);
  const dlCmp = f.deadLetterCmp;
  return {
    sourceRecords: f.sourceRecords,
    outputs: sumOut((r) => r.outputs),
    uncommittedOutputs: sumOut((r) => r.uncommittedOutputs),
    abortedCopies: sumOut((r) => r.uncommittedOutputs - r.outputs),
    duplicates: sumOut((r) => r.duplicates) + dlCmp.duplicates,
    missing: sumOut((r) => r.missing + r.unexpected) + dlCmp.missing + dlCmp.unexpected,
    deadLetters: f.deadLetterSources.length,
    preparedXaBranches: f.prepared.length,
    hangingPartitions: f.hangingWhere.length,
  };
}

/** The verdicts of a run, in the order `verify` prints them. */
export function checksOf(spec: PipelineSpec, f: Findings, totals: VerifyReport['totals']): Check[] {
  const { reports, goneTopics, unread, prepared, unapplied, tableProblems, hangingWhere } = f;
  const dlCmp = f.deadLetterCmp;
  const name = (r: PartitionReport) =>
    spec.source.topics ? `partition ${r.partition} (${r.topic}[${r.topicPartition}])` : `partition ${r.partition}`;
  const missingWhere = [
    ...f.outputs
      .filter((o) => o.missing + o.unexpected > 0)
      .map(
        (o) =>
          `${spec.kafkaSink.topic}[${o.partition}]${o.partition >= f.outputPartitions ? ' (no such partition)' : ''}: ${o.missing} missing, ${o.unexpected} unexpected`,
      ),
    ...(dlCmp.missing + dlCmp.unexpected > 0
      ? [`${spec.deadLetterTopic}: ${dlCmp.missing} missing, ${dlCmp.unexpected} unexpected`]
      : []),
  ];
  return [
    {
      name: 'source topics exist',
      ok: goneTopics.length === 0,
      detail: goneTopics.length
        ? goneTopics
            .map((t) => `source topic '${t}' does not exist (any more); its partitions cannot be checked`)
            .join('; ')
        : `${sourceTopics(spec).length} topic(s)`,
    },
    {
      name: 'no duplicates (read_committed)',
      ok: totals.duplicates === 0,
      detail: `${totals.duplicates} duplicate(s)`,
    },
    {
      name: 'nothing missing (read_committed)',
      ok: totals.missing === 0,
      detail: missingWhere.length
        ? `${totals.missing} missing or unexpected: ${missingWhere.slice(0, 5).join('; ')}`
        : '0 missing or unexpected',
    },
    {
      name: 'source order per partition',
      ok: reports.every((r) => r.inOrder),
      detail:
        reports
          .filter((r) => !r.inOrder)
          .map((r) => `${name(r)} out of order`)
          .join('; ') || 'in order',
    },
    {
      name: 'MySQL tables equal the rows applied once',
      ok: tableProblems.length === 0,
      detail: tableProblems.slice(0, 5).join('; ') || `${f.expectedRows} row(s) match`,
    },
    {
      name: 'every committed epoch applied to the tables',
      ok: unapplied.length === 0,
      detail:
        unapplied.map((x) => `partition ${x.partition} epoch ${x.epoch} staged, not applied`).join('; ') || '0 pending',
    },
    {
      name: 'no prepared XA branch left',
      ok: prepared.length === 0,
      detail: prepared.map(xidToString).join(', ') || '0 prepared',
    },
    {
      name: 'no transaction holds back the LSO',
      ok: hangingWhere.length === 0,
      detail: hangingWhere.join('; ') || 'LSO = high watermark everywhere',
    },
    {
      name: 'ledger and progress markers agree',
      ok: reports.every((r) => r.ledgerEpoch === r.markerEpoch),
      detail:
        reports
          .filter((r) => r.ledgerEpoch !== r.markerEpoch)
          .map((r) => `${name(r)}: ledger epoch ${r.ledgerEpoch}, marker epoch ${r.markerEpoch}`)
          .join('; ') || 'agree',
    },
    {
      name: 'caught up with the source',
      ok:
        reports.every((r) => r.committedThrough === null || r.committedThrough === r.sourceEnd) && unread.length === 0,
      detail:
        [
          ...reports
            .filter((r) => r.committedThrough !== r.sourceEnd)
            .map((r) => `${name(r)}: committed through ${r.committedThrough}, source ends at ${r.sourceEnd}`),
          ...unread.map((u) => `${u}: has records but no partition workflow reads it`),
        ].join('; ') || 'lag 0',
    },
    budgetCheck(f.deadLetters, f.sourceRecords),
  ];
}
