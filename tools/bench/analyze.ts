/**
 * Pure arithmetic over what a benchmark run observed: percentiles and the per-epoch time split
 * of onceflow's epochs (from the activities' observed events).
 */
import type { ObservedEvent, PrepareSplit } from '../../src/activities';
import type { HistoryEventLike } from '../../src/history';

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export interface Percentiles {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export function percentiles(values: number[]): Percentiles {
  const s = [...values].sort((a, b) => a - b);
  return {
    n: s.length,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    max: s[s.length - 1] ?? NaN,
  };
}

function p50p99(values: number[]): { p50: number; p99: number } {
  const { p50, p99 } = percentiles(values);
  return { p50, p99 };
}

type Prepared = Extract<ObservedEvent, { kind: 'prepared' }>;
type Committed = Extract<ObservedEvent, { kind: 'committed' }>;

/** Mean milliseconds per epoch spent in each part of the epoch cycle. */
export interface EpochSplit extends PrepareSplit {
  epochs: number;
  recordsPerEpoch: number;
  /** prepare start of epoch e → prepare start of epoch e+1 on the same partition */
  cycleMs: number;
  prepareMs: number;
  kafkaCommitMs: number;
  /** XA COMMIT alone (the apply of staged rows is in applyMs) */
  mysqlCommitMs: number;
  /** applying the staged rows to the tables after XA COMMIT (absent in results from before it was measured) */
  applyMs?: number;
  /** time of the cycle in which no activity of the partition ran: Temporal's workflow/activity round trips (early commits run beside them) */
  temporalMs: number;
  /** temporalMs + InitProducerId + XA PREPARE + both commits (not the apply): the part of an epoch that does not move data */
  coordinationMs: number;
  retries: number;
  /** the tail of the same cycles: p50 / p99 of the cycle, of its prepare and of its temporal part (absent in results from before it was measured) */
  tail?: Record<'cycleMs' | 'prepareMs' | 'temporalMs', { p50: number; p99: number }>;
  /** the slowest SLOWEST_SHARE of those cycles: how many, their mean parts and when they began (absent in results from before it was measured) */
  slowest?: SlowCycles;
}

/** Share of cycles, the longest, whose parts `slowest` breaks down: the cycles behind a latency p99. */
export const SLOWEST_SHARE = 0.05;

/** Mean ms of each part over the slowest cycles, and each one's start in s after the first epoch began. */
export interface SlowCycles {
  cycles: number;
  meanMs: Record<'cycle' | 'prepare' | 'temporal' | 'kafkaCommit' | 'mysqlCommit' | keyof PrepareSplit, number>;
  startsSec: number[];
}

type Cycle = {
  startedAt: number;
  cycle: number;
  prepare: number;
  temporal: number;
  kafkaCommit: number;
  mysqlCommit: number;
} & PrepareSplit;

function slowestCycles(cycles: Cycle[]): SlowCycles | undefined {
  if (!cycles.length) return undefined;
  const first = Math.min(...cycles.map((c) => c.startedAt));
  // One row per cycle start: a group epoch's members share one cycle (and one prepare).
  const unique = [...new Map(cycles.map((c) => [c.startedAt, c])).values()].sort((a, b) => b.cycle - a.cycle);
  const slow = unique.slice(0, Math.max(1, Math.ceil(unique.length * SLOWEST_SHARE)));
  // Every part of a Cycle but its start time.
  const keys = (Object.keys(slow[0]!) as (keyof Cycle)[]).filter((k) => k !== 'startedAt');
  const meanMs = Object.fromEntries(
    keys.map((k) => [k, slow.reduce((a, c) => a + c[k], 0) / slow.length]),
  ) as SlowCycles['meanMs'];
  return {
    cycles: slow.length,
    meanMs,
    startsSec: slow.map((c) => Math.round((c.startedAt - first) / 100) / 10).sort((a, b) => a - b),
  };
}

/** Length of the union of [start, end) intervals clipped to [from, to). */
function covered(intervals: [number, number][], from: number, to: number): number {
  const clipped = intervals
    .map(([a, b]) => [Math.max(a, from), Math.min(b, to)] as [number, number])
    .filter(([a, b]) => b > a)
    .sort((x, y) => x[0] - y[0]);
  let total = 0;
  let curA = -Infinity;
  let curB = -Infinity;
  for (const [a, b] of clipped) {
    if (a > curB) {
      if (curB > curA) total += curB - curA;
      curA = a;
      curB = b;
    } else curB = Math.max(curB, b);
  }
  if (curB > curA) total += curB - curA;
  return total;
}

export function epochSplit(events: ObservedEvent[]): EpochSplit {
  const prepared = events.filter((e): e is Prepared => e.kind === 'prepared');
  const committed = events.filter((e): e is Committed => e.kind === 'committed');
  const retries = events.filter((e) => e.kind === 'retry').length;
  const byPartition = new Map<number, Map<number, Prepared>>();
  for (const e of prepared) {
    let m = byPartition.get(e.partition);
    if (!m) byPartition.set(e.partition, (m = new Map()));
    m.set(e.epoch, e); // a retried prepare replaces the failed attempt
  }
  const commitsOf = new Map<string, Committed[]>();
  for (const c of committed) {
    const k = `${c.partition}/${c.epoch}`;
    commitsOf.set(k, [...(commitsOf.get(k) ?? []), c]);
  }
  const sums: Record<string, number> = {};
  const add = (k: string, v: number) => (sums[k] = (sums[k] ?? 0) + v);
  let n = 0;
  let cycles = 0;
  const perCycle = { cycleMs: [] as number[], prepareMs: [] as number[], temporalMs: [] as number[] };
  const allCycles: Cycle[] = [];
  for (const [partition, byEpoch] of byPartition) {
    const intervals: [number, number][] = [];
    for (const p of byEpoch.values()) intervals.push([p.startedAt, p.startedAt + p.ms]);
    // Early commits (src/activities/decided.ts) run outside any activity, in the gap `temporal` measures.
    for (const c of committed)
      if (c.partition === partition && !c.early) intervals.push([c.startedAt, c.startedAt + c.ms]);
    const epochs = [...byEpoch.keys()].sort((a, b) => a - b);
    for (const e of epochs) {
      const p = byEpoch.get(e)!;
      n++;
      add('records', p.records);
      add('prepareMs', p.ms);
      for (const [k, v] of Object.entries(p.split)) add(k, v);
      let kafkaCommit = 0;
      let mysqlCommit = 0;
      for (const c of commitsOf.get(`${partition}/${e}`) ?? []) {
        if (c.side === 'kafka') {
          add('kafkaCommitMs', c.ms);
          kafkaCommit += c.ms;
        } else {
          add('mysqlCommitMs', c.ms - (c.applyMs ?? 0));
          add('applyMs', c.applyMs ?? 0);
          mysqlCommit += c.ms;
        }
      }
      const next = byEpoch.get(e + 1);
      if (next) {
        cycles++;
        const cycle = next.startedAt - p.startedAt;
        const temporal = cycle - covered(intervals, p.startedAt, next.startedAt);
        add('cycleMs', cycle);
        add('temporalMs', temporal);
        perCycle.cycleMs.push(cycle);
        perCycle.prepareMs.push(p.ms);
        perCycle.temporalMs.push(temporal);
        allCycles.push({
          startedAt: p.startedAt,
          cycle,
          prepare: p.ms,
          temporal,
          kafkaCommit,
          mysqlCommit,
          ...p.split,
        });
      }
    }
  }
  const mean = (k: string, d = n) => (d > 0 ? (sums[k] ?? 0) / d : 0);
  const split: EpochSplit = {
    epochs: n,
    recordsPerEpoch: mean('records'),
    cycleMs: mean('cycleMs', cycles),
    prepareMs: mean('prepareMs'),
    readMs: mean('readMs'),
    initMs: mean('initMs'),
    transformMs: mean('transformMs'),
    kafkaMs: mean('kafkaMs'),
    previousCommitWaitMs: mean('previousCommitWaitMs'),
    mysqlMs: mean('mysqlMs'),
    xaPrepareMs: mean('xaPrepareMs'),
    kafkaCommitMs: mean('kafkaCommitMs'),
    mysqlCommitMs: mean('mysqlCommitMs'),
    applyMs: mean('applyMs'),
    temporalMs: mean('temporalMs', cycles),
    coordinationMs: 0,
    retries,
    tail: {
      cycleMs: p50p99(perCycle.cycleMs),
      prepareMs: p50p99(perCycle.prepareMs),
      temporalMs: p50p99(perCycle.temporalMs),
    },
  };
  const slowest = slowestCycles(allCycles);
  if (slowest) split.slowest = slowest;
  split.coordinationMs =
    split.temporalMs + split.initMs + split.xaPrepareMs + split.kafkaCommitMs + split.mysqlCommitMs;
  return split;
}

/** First activity start and last commit end among the events: the span in which C moved data. */
export function activeSpan(events: ObservedEvent[]): { firstAt: number; lastAt: number } {
  let firstAt = Infinity;
  let lastAt = -Infinity;
  for (const e of events) {
    if (e.kind === 'prepared') firstAt = Math.min(firstAt, e.startedAt);
    if (e.kind === 'committed') lastAt = Math.max(lastAt, e.startedAt + e.ms);
  }
  return { firstAt, lastAt };
}

/**
 * Per epoch: end of its prepare → start of its first commit step, as the activities saw it. This
 * is the activity completion, the workflow task that schedules the commit, and the commit's
 * dispatch — including any wait for a free activity slot of the worker.
 */
export function commitStartWait(events: ObservedEvent[]): Percentiles & { mean: number } {
  const preparedAt = new Map<string, number>();
  for (const e of events) if (e.kind === 'prepared') preparedAt.set(`${e.partition}/${e.epoch}`, e.startedAt + e.ms);
  const commitAt = new Map<string, number>();
  for (const e of events) {
    if (e.kind !== 'committed') continue;
    const k = `${e.partition}/${e.epoch}`;
    commitAt.set(k, Math.min(commitAt.get(k) ?? Infinity, e.startedAt));
  }
  const waits: number[] = [];
  for (const [k, at] of commitAt) {
    const p = preparedAt.get(k);
    if (p !== undefined) waits.push(at - p);
  }
  return { ...percentiles(waits), mean: waits.length ? waits.reduce((a, b) => a + b, 0) / waits.length : NaN };
}

/** What the Temporal server recorded for a pipeline's partition workflows (or group workflows, when grouped; all runs), per committed epoch (group epoch). */
export interface TemporalCost {
  epochs: number;
  workflowRuns: number;
  events: number;
  workflowTasks: number;
  activityTasks: number;
  eventsPerEpoch: number;
  workflowTasksPerEpoch: number;
  activityTasksPerEpoch: number;
  /** per activity type: tasks scheduled, and scheduled → started (history event times) p50 / p99 ms */
  activities: Record<string, { count: number; scheduleToStartP50Ms: number; scheduleToStartP99Ms: number }>;
  /**
   * Workflow tasks (history event times, p50 / p99 ms): scheduled → started is the server
   * handing the task to a polling worker; started → completed is the worker's run of it, with
   * the poll answer's and the completion's trips (absent in results from before it was measured).
   */
  workflowTaskMs?: { scheduleToStart: { p50: number; p99: number }; startToComplete: { p50: number; p99: number } };
}

const eventMs = (e: HistoryEventLike) => Number(e.eventTime?.seconds ?? NaN) * 1000 + (e.eventTime?.nanos ?? 0) / 1e6;

/** Counts workflow and activity tasks in the histories of a pipeline's partition (or group) workflows (one list of events per run). */
export function temporalCost(runs: HistoryEventLike[][], epochs: number): TemporalCost {
  let events = 0;
  let workflowTasks = 0;
  const waits = new Map<string, number[]>();
  const counts = new Map<string, number>();
  const wtDispatch: number[] = [];
  const wtRun: number[] = [];
  for (const run of runs) {
    events += run.length;
    const scheduled = new Map<string, { type: string; at: number }>();
    const at = new Map<string, number>(); // workflow task scheduled / started events by id
    for (const e of run) {
      if (e.workflowTaskScheduledEventAttributes) at.set(String(e.eventId), eventMs(e));
      const ws = e.workflowTaskStartedEventAttributes;
      if (ws) {
        at.set(String(e.eventId), eventMs(e));
        const from = at.get(String(ws.scheduledEventId));
        if (from !== undefined) wtDispatch.push(eventMs(e) - from);
      }
      const wc = e.workflowTaskCompletedEventAttributes;
      if (wc) {
        workflowTasks++;
        const from = at.get(String(wc.startedEventId));
        if (from !== undefined) wtRun.push(eventMs(e) - from);
      }
      const s = e.activityTaskScheduledEventAttributes;
      if (s) {
        const type = s.activityType?.name ?? '?';
        counts.set(type, (counts.get(type) ?? 0) + 1);
        scheduled.set(String(e.eventId), { type, at: eventMs(e) });
      }
      const st = e.activityTaskStartedEventAttributes;
      if (st) {
        const s0 = scheduled.get(String(st.scheduledEventId));
        if (s0) waits.set(s0.type, [...(waits.get(s0.type) ?? []), eventMs(e) - s0.at]);
      }
    }
  }
  const activityTasks = [...counts.values()].reduce((a, b) => a + b, 0);
  const per = (x: number) => (epochs > 0 ? x / epochs : NaN);
  const activities: TemporalCost['activities'] = {};
  for (const [type, count] of [...counts].sort((a, b) => b[1] - a[1])) {
    const p = percentiles(waits.get(type) ?? []);
    activities[type] = { count, scheduleToStartP50Ms: p.p50, scheduleToStartP99Ms: p.p99 };
  }
  return {
    epochs,
    workflowRuns: runs.length,
    events,
    workflowTasks,
    activityTasks,
    eventsPerEpoch: per(events),
    workflowTasksPerEpoch: per(workflowTasks),
    activityTasksPerEpoch: per(activityTasks),
    activities,
    workflowTaskMs: { scheduleToStart: p50p99(wtDispatch), startToComplete: p50p99(wtRun) },
  };
}
