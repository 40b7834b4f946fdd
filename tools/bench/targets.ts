/**
 * A bench run's targets as one list of checks — the figure, its threshold, met or not — so that
 * the report's verdict lines and the table of several runs side by side (the first screen of
 * docs/performance.md) judge a run the same way. A run is judged by the targets it recorded.
 */
import { TARGETS, type BenchResult, type LatencyRun, type ScaleRun } from './run';

export interface TargetCheck {
  /** the same check in every run (the row of the table of runs) */
  id: string;
  /** what is measured, short */
  what: string;
  /** the threshold as a user reads it, e.g. "≥ 1.0× B" */
  target: string;
  value: number;
  unit: '×' | 'ms' | 'runs';
  met: boolean;
}

export const targetsOf = (r: BenchResult) => r.targets ?? TARGETS;

/** Figures as the pages print them (a dash for a figure that was not measured). */
export const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '–');
export const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
/** A ratio next to its target: three decimals where two would round it onto the target (0.897 is not 0.90). */
export const fT = (x: number, target: number) =>
  Number.isFinite(x) && f2(x) === f2(target) && x !== target ? x.toFixed(3) : f2(x);

/**
 * A paced latency run's p50 or p99 against its target. A run that did not see every record met
 * no latency target (`all` false).
 */
export function pacedCheck(l: LatencyRun, k: 'p50' | 'p99', T: typeof TARGETS) {
  const value = l.latencyMs[k];
  const all = l.seen >= l.records;
  const target = k === 'p50' ? T.latencyP50Ms : T.latencyP99Ms;
  return { value, target, all, met: all && Number.isFinite(value) && value <= target };
}

type Ref = { value: number; of: number[] };

/**
 * The reference figure of row j of one scale series (rows in the order they ran): for a row of
 * the reference count (the series' first), the first row; for any other, the mean of the
 * reference-count rows just before and just after it (just before only, without the bracket).
 */
export function scaleReference(rows: ScaleRun[], j: number, figure: (s: ScaleRun) => number): Ref {
  const isRef = (x: ScaleRun) => x.partitions === rows[0]!.partitions;
  const of = isRef(rows[j]!)
    ? [rows[0]!]
    : [
        rows.slice(0, j).reverse().find(isRef)!,
        ...rows
          .slice(j + 1)
          .filter(isRef)
          .slice(0, 1),
      ];
  const figs = of.map(figure);
  return { value: figs.reduce((a, b) => a + b, 0) / figs.length, of: figs };
}

/** The scale phase's series: ungrouped first, then each number of groups; rows in the order they ran. */
export function scaleSeries(r: BenchResult): ScaleRun[][] {
  const runs = r.scale?.runs ?? [];
  return [undefined, ...new Set(runs.map((s) => s.parallelism).filter((g): g is number => g !== undefined))]
    .map((g) => runs.filter((s) => s.parallelism === g))
    .filter((x) => x.length > 0);
}

/** Partition counts from this one up are held to the scale targets (the issue's: 64, and 256 where the machine holds it). */
export const SCALE_TARGET_FROM = 64;

export interface ScaleCheck {
  run: ScaleRun;
  ref: ScaleRun;
  throughput: Ref & { ratio: number; met: boolean };
  temporal: Ref & { ratio: number; met: boolean };
  /** B's records/s at this count ÷ its reference, for comparison */
  bRatio: number;
}

/**
 * Per series, each count at or above SCALE_TARGET_FROM (or the series' largest, when none is)
 * against its reference-count runs, judged by `T` (by default the targets the run recorded).
 */
export function scaleChecks(r: BenchResult, T: typeof TARGETS = targetsOf(r)): ScaleCheck[] {
  const out: ScaleCheck[] = [];
  for (const runs of scaleSeries(r)) {
    const ref = runs[0]!;
    const others = runs.map((s, j) => ({ s, j })).filter(({ s }) => s.partitions !== ref.partitions);
    if (!others.length) continue;
    const top = Math.max(...others.map(({ s }) => s.partitions));
    const from = Math.min(SCALE_TARGET_FROM, top);
    for (const { s, j } of others) {
      if (s.partitions < from) continue;
      const rate = scaleReference(runs, j, (x) => x.C.recordsPerSec);
      const cpu = scaleReference(runs, j, (x) => x.C.servicesCpuMsPer1k.temporal);
      const b = scaleReference(runs, j, (x) => x.B.recordsPerSec);
      const rateRatio = s.C.recordsPerSec / rate.value;
      const cpuRatio = s.C.servicesCpuMsPer1k.temporal / cpu.value;
      out.push({
        run: s,
        ref,
        throughput: { ...rate, ratio: rateRatio, met: rateRatio >= T.scaleThroughput },
        temporal: { ...cpu, ratio: cpuRatio, met: cpuRatio <= T.scaleTemporalCpu },
        bRatio: s.B.recordsPerSec / b.value,
      });
    }
  }
  return out;
}

export const best = <C extends { recordsPerSec: number }>(cs: C[]) =>
  cs.length ? cs.reduce((x, y) => (y.recordsPerSec > x.recordsPerSec ? y : x)) : undefined;

/** Every C run of the result (throughput, latency, both data sets, scale), verified or not. */
function verifications(r: BenchResult): boolean[] {
  const lat = (ls: LatencyRun[]) =>
    ls.filter((l) => l.engine === 'C' && l.verified !== undefined).map((l) => !!l.verified);
  return [
    ...r.C.map((c) => c.verified),
    ...lat(r.latency),
    ...(r.distinct ? [...r.distinct.C.map((c) => c.verified), ...lat(r.distinct.latency)] : []),
    ...(r.scale?.runs ?? []).flatMap((s) => [s.C.verified, ...lat(s.latency)]),
  ];
}

/**
 * The run's checks against `T` (by default the targets it recorded). The scale checks are of
 * the grouped series when the run has one (the targets are for groups), else of the ungrouped.
 */
export function targetChecks(r: BenchResult, T: typeof TARGETS = targetsOf(r)): TargetCheck[] {
  const out: TargetCheck[] = [];
  const atLeast = (id: string, what: string, value: number | undefined, t: number) => {
    if (value !== undefined) out.push({ id, what, target: `≥ ${t}× B`, value, unit: '×', met: value >= t });
  };
  const paced = (id: string, on: string, l: LatencyRun | undefined) => {
    if (!l) return;
    for (const k of ['p50', 'p99'] as const) {
      const { value, target, met } = pacedCheck(l, k, T);
      out.push({
        id: `${id}-${k}`,
        what: `paced ${f0(l.rate)} records/s${on}: ${k}`,
        target: `≤ ${target} ms`,
        value,
        unit: 'ms',
        met,
      });
    }
  };
  const C = (ls: LatencyRun[]) => ls.find((l) => l.engine === 'C');
  atLeast('best', 'best C ÷ B', best(r.C)?.vsB, T.bestCvsB);
  atLeast(
    'latency-settings',
    'C at the latency settings ÷ B',
    r.C.find((c) => c.latencySettings)?.vsB,
    T.latencySettingsCvsB,
  );
  paced('paced', '', C(r.latency));
  const d = r.distinct;
  if (d) {
    const b = best(d.C);
    atLeast('distinct-best', 'distinct keys: best C ÷ B', b?.vsB, T.distinctBestCvsB);
    atLeast(
      'distinct-latency-settings',
      'distinct keys: C at the latency settings ÷ B',
      d.C.find((c) => c.latencySettings)?.vsB,
      T.distinctLatencySettingsCvsB,
    );
    if (b) {
      const ratio = b.servicesCpuMsPer1k.mariadb / d.B.servicesCpuMsPer1k.mariadb;
      out.push({
        id: 'distinct-mariadb',
        what: "distinct keys: best C's MariaDB CPU per record ÷ B's",
        target: `≤ ${T.distinctMariadbCpuVsB}×`,
        value: ratio,
        unit: '×',
        met: ratio <= T.distinctMariadbCpuVsB,
      });
    }
    paced('distinct-paced', ', distinct keys', C(d.latency));
  }
  const scaled = scaleChecks(r, T);
  const grouped = scaled.some((s) => s.run.parallelism);
  for (const s of scaled.filter((x) => !grouped || x.run.parallelism)) {
    const at = `${s.run.partitions} partitions${s.run.parallelism ? `, ${s.run.parallelism} groups` : ', ungrouped'}`;
    const id = `scale-${s.run.partitions}${s.run.parallelism ? `g${s.run.parallelism}` : ''}`;
    out.push(
      {
        id: `${id}-throughput`,
        what: `${at}: C records/s ÷ at ${s.ref.partitions}`,
        target: `≥ ${T.scaleThroughput}×`,
        value: s.throughput.ratio,
        unit: '×',
        met: s.throughput.met,
      },
      {
        id: `${id}-temporal`,
        what: `${at}: Temporal CPU per record ÷ at ${s.ref.partitions}`,
        target: `≤ ${T.scaleTemporalCpu}×`,
        value: s.temporal.ratio,
        unit: '×',
        met: s.temporal.met,
      },
    );
  }
  const v = verifications(r);
  const failed = v.filter((x) => !x).length;
  out.push({
    id: 'verified',
    what: 'C runs verified exactly once',
    target: 'all',
    value: v.length - failed,
    unit: 'runs',
    met: failed === 0,
  });
  return out;
}

const cell = (c: TargetCheck | undefined, all: number) => {
  if (!c) return '–';
  const threshold = Number(/[\d.]+/.exec(c.target)?.[0]);
  const shown =
    c.unit === 'ms' ? `${f0(c.value)} ms` : c.unit === 'runs' ? `${c.value} of ${all}` : `${fT(c.value, threshold)}×`;
  return `${shown} ${c.met ? 'met' : '**missed**'}`;
};

/**
 * The targets of several runs side by side, oldest first, every run judged by the newest run's
 * targets: a row per check (in the newest run's order, then checks only older runs had), a
 * column per run, and in how many runs each was met.
 */
export function targetsTable(runs: { name: string; result: BenchResult }[]): string[] {
  const T = targetsOf(runs[runs.length - 1]!.result);
  const checks = runs.map((x) => targetChecks(x.result, T));
  const rows: TargetCheck[] = [];
  for (const cs of [...checks].reverse()) for (const c of cs) if (!rows.some((x) => x.id === c.id)) rows.push(c);
  const verifiedRuns = runs.map((x) => verifications(x.result).length);
  return [
    `| target | ${runs.map((x) => x.name).join(' | ')} | met in |`,
    `|---|${runs.map(() => '---').join('|')}|---:|`,
    ...rows.map((row) => {
      const of = checks.map((cs) => cs.find((c) => c.id === row.id));
      const judged = of.filter((c): c is TargetCheck => !!c);
      return `| ${row.what} ${row.target} | ${of.map((c, i) => cell(c, verifiedRuns[i]!)).join(' | ')} | ${judged.filter((c) => c.met).length} of ${judged.length} |`;
    }),
  ];
}
