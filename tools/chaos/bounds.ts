/**
 * The soak's bounded-state checks: pure functions over its samples, so that a verdict of
 * "state bounded" is computed from the figures, never assumed. Each bound is either the rule
 * the code enforces (ledger, staging) or a no-growth comparison of the run's later part with
 * its earlier part (history per run, worker memory, table bytes). The progress topic has no
 * check: its compaction acts only on segments older than an hour, see the report's note.
 */
import { LEDGER_KEEP_EPOCHS, LEDGER_PRUNE_EVERY } from '../../src/mysql/ledger';
import type { Check } from '../../src/verify';
import type { Sample } from './types';

/** The later part of a run may hold at most this multiple of the earlier part's maximum. */
export const GROWTH_LIMIT = 1.5;

/** Growth is judged only over runs sampled for at least this long (the short soak is not). */
export const MIN_GROWTH_SPAN_S = 30 * 60;

/** True when the samples span long enough to judge growth (else only the rule bounds apply). */
export const growthJudged = (samples: Sample[]): boolean =>
  samples.length >= 6 && (samples.at(-1)?.atS ?? 0) - (samples[0]?.atS ?? 0) >= MIN_GROWTH_SPAN_S;

const max = (xs: number[]) => xs.reduce((a, b) => Math.max(a, b), 0);

/** Compares the first third of the samples that carry the figure with the last third. */
function noGrowth(name: string, samples: Sample[], pick: (s: Sample) => number[], unit: string): Check {
  const values = samples.map(pick).filter((v) => v.length > 0);
  const n = Math.max(1, Math.floor(values.length / 3));
  const a = max(values.slice(0, n).flat());
  const b = max(values.slice(values.length - n).flat());
  return {
    name,
    ok: values.length >= 3 && b <= GROWTH_LIMIT * a,
    detail: `max ${a} ${unit} in the first third, ${b} ${unit} in the last (limit ${GROWTH_LIMIT}×)`,
  };
}

/**
 * The rule bounds (ledger, staging) always; continue-as-new and no-growth checks when the run
 * is long enough to judge them (growthJudged).
 */
export function boundedStateChecks(samples: Sample[], o: { partitions: number; maxRecords: number }): Check[] {
  // Per partition: the first row, the last LEDGER_KEEP_EPOCHS epochs, up to LEDGER_PRUNE_EVERY
  // committed since the last prune, and the epoch just committed before its own prune runs.
  const ledgerBound = o.partitions * (2 + LEDGER_KEEP_EPOCHS + LEDGER_PRUNE_EVERY);
  // Staged rows are visible once their epoch committed, until applied: at most two epochs
  // per partition (one being applied, the next committed behind it).
  const stagedBound = o.partitions * 2 * o.maxRecords;
  const ledgerMax = max(samples.map((s) => s.ledgerRows));
  const stagedMax = max(samples.map((s) => s.stagedRows));
  const rules: Check[] = [
    {
      name: 'ledger rows within the pruning rule',
      ok: samples.length > 0 && ledgerMax <= ledgerBound,
      detail: `max ${ledgerMax}, bound ${ledgerBound}`,
    },
    {
      name: 'staged rows within two epochs per partition',
      ok: samples.length > 0 && stagedMax <= stagedBound,
      detail: `max ${stagedMax}, bound ${stagedBound}`,
    },
  ];
  if (!growthJudged(samples)) return rules;
  // History is bounded by continue-as-new: each partition's current run must have been
  // restarted (its event count fell) at least once during the soak.
  const restarted = samples[0]!.historyEvents.map((_, p) =>
    samples.some((s, i) => i > 0 && s.historyEvents[p]! < samples[i - 1]!.historyEvents[p]!),
  );
  return [
    ...rules,
    {
      name: 'every partition workflow continued as new',
      ok: restarted.length === o.partitions && restarted.every(Boolean),
      detail: restarted.map((r, p) => `p${p} ${r ? 'yes' : 'no'}`).join(', '),
    },
    noGrowth('history per run does not grow', samples, (s) => s.historyEvents, 'events'),
    noGrowth('worker RSS does not grow', samples, (s) => s.workerRssMb.filter((x): x is number => x !== null), 'MB'),
    noGrowth('table bytes do not grow', samples, (s) => [s.tableBytes], 'bytes'),
  ];
}
