/**
 * `npm run bench`: one run that measures, on the same generated data,
 *   A  the broker's limit with Kafka's own ProducerPerformance (plain and transactional),
 *   B  the same pipeline at-least-once (kafkajs consume → produce, batched MySQL upserts),
 *   C  onceflow exactly-once at a few epoch sizes (each run verified exactly-once),
 * then end-to-end latency (source append time → visible to a read_committed reader) of B and C
 * at a paced input rate, then the scale phase: B and C (at the latency settings) on the same
 * number of records spread over more source partitions, each with a short paced latency run (and,
 * bracketing each count, the first count's throughput runs again).
 * The engines under test run in child processes (CPU, peak memory).
 */
import { createTopicsReady } from '../../src/kafka/topics';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Admin } from 'kafkajs';
import type { ObservedEvent } from '../../src/activities';
import { controlPipeline, partitionStatus, startPipeline } from '../../src/client';
import { openConnections, type Connections } from '../../src/connections';
import { loadSettings, runDir, toolPaths } from '../../src/config';
import type { Pool } from 'mysql2/promise';
import { ISOLATION, fetchPartitions, type KafkaCluster } from '../../src/kafka/internals';
import { recoverXids, rollbackXid } from '../../src/mysql/branch';
import { pipelineGtridPrefix } from '../../src/mysql/xid';
import {
  compareSpec,
  dropPipelineTables,
  makeEvents,
  produceRecords,
  type KeySpace,
} from '../../examples/flink-compare/scenario';
import {
  groupWorkflowId,
  partitionWorkflowId,
  pipelineWorkflowId,
  type EpochBounds,
  type PipelineSpec,
} from '../../src/spec';
import { readAll, verifyPipeline } from '../../src/verify';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import {
  activeSpan,
  commitStartWait,
  epochSplit,
  percentiles,
  temporalCost,
  type EpochSplit,
  type Percentiles,
  type TemporalCost,
} from './analyze';
import { COMMIT_ACTIVITIES, committedEpochs, type HistoryEventLike } from '../../src/history';
import type { BaselineArgs, BaselineBatch } from './baseline';
import { statCpuMs, type FromChild, type ThreadCpu, type ToChild, type Usage } from './ipc';
import { serviceGauge, type ServiceGauge } from './service-gauge';

const ROOT = join(__dirname, '..', '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * How long the Temporal server goes on working for a run after it ended. Every workflow task
 * leaves a start-to-close and a sticky schedule-to-start timer task behind, every activity a
 * heartbeat-timeout one (10 s each by default); they fire about 10 s later and do nothing, but
 * the server reads and processes each. In a probe of 2026-12-03 (docs/performance-history.md, "Temporal
 * CPU: the previous run's timers"), 528 of them fired in the 11 s after the 64-partition
 * ungrouped latency run ended — inside the window of the grouped run that followed it. So after
 * every C run the bench waits this long: a run's Temporal CPU includes its own deferred timer
 * tasks, and the next run starts on a quiet server.
 */
export const TEMPORAL_TAIL_MS = 11_000;
/** Seconds of append time per window of LatencyRun.latencyByWindow. */
export const LATENCY_WINDOW_S = 5;
/** A time limit for Promise.race that does not keep the process alive once the race is over. */
const limit = (ms: number) => new Promise<undefined>((r) => setTimeout(() => r(undefined), ms).unref());

/**
 * One C run of the throughput phase on the main data: what differs from the base spec.
 * `epoch` is merged into the spec's epoch bounds (base: maxBytes 64 MiB, maxWaitMs 1000); a
 * field the spec does not know is refused by its validation, naming the field.
 */
export interface CVariant {
  label: string;
  epoch: Record<string, unknown>;
  /** default 'staged' */
  mysqlMode?: 'staged' | 'direct';
  /** false: a worker that takes no activity task eagerly; default true */
  eager?: boolean;
  /** spec.parallelism: the number of partition groups (absent: one workflow per source partition) */
  parallelism?: number;
  /**
   * Bytes of filler added to the spec (transformOptions.pad, which the bench's transform ignores):
   * the spec rides in every activity input, so this probes what its size costs the Temporal server.
   */
  specPadBytes?: number;
  /**
   * The worker of this run from another checkout of onceflow (a directory, e.g. a `git worktree`
   * of an earlier commit) with its own workflow bundle: the code before a change measured in the
   * same run as the code after it. The pipeline is started and verified by this checkout.
   */
  tree?: string;
  /** this run has exactly the latency phase's settings (set by cVariants) */
  latencySettings?: boolean;
}

export interface BenchOptions {
  records: number;
  partitions: number;
  recordBytes: number;
  epochSizes: number[];
  /** Epoch sizes also run with mysqlSink.mode 'direct' (rows written inside the XA branch), side by side with the staged default. */
  directEpochSizes: number[];
  /** Epoch sizes also run by a worker that takes no activity task eagerly (maxEagerActivityReservationsPerWorkflowTask 0). */
  noEagerEpochSizes: number[];
  /** More C runs (BENCH_C_VARIANTS), after those of the three lists above. */
  extraVariants?: CVariant[];
  /** Paced input rate of the latency phase (records/s); 0 = half the slower of B and the best C. */
  latencyRate: number;
  latencySeconds: number;
  /**
   * Seconds of paced input before the measured seconds of every latency run (the phase's and the
   * scale runs'), the same for B and C: their records' latencies are reported apart (warm-up
   * figures and per window), not in the measured percentiles. Absent (results from before it): 0.
   */
  latencyWarmupSeconds?: number;
  /** The latency settings: merged into C's epoch bounds in the latency runs, one throughput run and the scale phase (BENCH_LATENCY_EPOCH; default {"maxRecords":20000}). */
  latencyEpoch?: Record<string, unknown>;
  /** The latency settings' spec.parallelism (BENCH_LATENCY_PARALLELISM; default 1, empty: ungrouped): C's latency run, the throughput run at the latency settings, the grouped scale series' latency runs. */
  latencyParallelism?: number;
  /** C's worker processes in the paced latency run (BENCH_LATENCY_WORKERS; default 1) */
  latencyWorkers?: number;
  /** More C latency runs, one per checkout (BENCH_LATENCY_TREES, comma-separated directories, e.g. `git worktree`s of the commits before a change): before and after paced in one run */
  latencyTrees?: string[];
  /** Scale phase: source partition counts (empty or absent: no scale phase); the first is the reference of the ratios. */
  scalePartitions?: number[];
  /** Scale phase: records per partition count (the same total at every count). */
  scaleRecords?: number;
  /** Scale phase: seconds of paced input per partition count (at the latency phase's rate). */
  scaleLatencySeconds?: number;
  /** Scale phase: also run C at every partition count with this many partition groups (BENCH_SCALE_PARALLELISM; absent: no grouped series). */
  scaleParallelism?: number;
  /** The wait after every C run (TEMPORAL_TAIL_MS unless given; the small test in npm test shortens it, which changes how much of the tail is measured, not what runs). */
  temporalTailMs?: number;
  /** Scale phase: false skips the ungrouped C series (BENCH_SCALE_UNGROUPED=0: for partition counts at which one workflow per partition would take most of the run); B and the grouped series still run. */
  scaleUngrouped?: boolean;
  /** Scale phase: the ungrouped C series runs only at partition counts up to this (BENCH_SCALE_UNGROUPED_MAX; default 64: at 256 one workflow per partition would take most of the run); above it B and the grouped series run. Absent: every count. */
  scaleUngroupedMax?: number;
  /**
   * Scale phase: the reference count's (the first count's) B and C throughput runs again after
   * every other count (BENCH_SCALE_BRACKET; default on; 0: each count once), so that each count's
   * ratios are against the mean of the reference runs just before and just after it: the machine's
   * speed drifts within the phase, and a reference measured minutes earlier carries that drift
   * into the ratio.
   */
  scaleBracket?: boolean;
  /**
   * B again after every C run, so that each C run's C/B is against the mean of the B runs on
   * either side of it (BENCH_BRACKET_B; default on): the machine's speed drifts within minutes,
   * and a single B at the start would carry that drift into every later ratio.
   */
  bracketB?: boolean;
  /** transaction duration of the transactional ProducerPerformance run */
  perfTransactionMs: number;
  /**
   * The throughput and latency phases once more on data with (nearly) one row key per record
   * (BENCH_DISTINCT; default on, 0: off): same record count and size, slot_time a second of
   * 2019 instead of one of 18 minutes (KeySpace 'distinct'), so no same-key rows merge in an epoch.
   */
  distinctKeys?: boolean;
  label?: string;
  log?: (line: string) => void;
}

/** Targets printed next to the figures (issue 11, raised by issue 40). The verdicts are computed from each run's figures; a result keeps the targets of its day. */
export const TARGETS = {
  /** best C records/s ≥ this × B */
  bestCvsB: 1.0,
  /** C records/s at the latency settings ≥ this × B */
  latencySettingsCvsB: 0.9,
  /** of the paced records after the warm-up */
  latencyP50Ms: 80,
  latencyP99Ms: 250,
  /** distinct-key data: best C records/s ≥ this × B on the same data */
  distinctBestCvsB: 1.0,
  /** distinct-key data: C at the latency settings ≥ this × B */
  distinctLatencySettingsCvsB: 0.9,
  /** distinct-key data: MariaDB CPU ms per 1,000 records of the best C ≤ this × B's */
  distinctMariadbCpuVsB: 1.1,
  /** at the largest partition count: C records/s ≥ this × C at the first count */
  scaleThroughput: 0.9,
  /** at the largest partition count: Temporal CPU ms per 1k records ≤ this × at the first count */
  scaleTemporalCpu: 1.2,
} as const;

/** The spec's epoch bounds in every bench run, before a variant's or the latency settings' fields. */
export const BASE_EPOCH = { maxBytes: 64 << 20, maxWaitMs: 1000 } as const;
/**
 * C's epoch in the latency phase and its throughput run at those settings. The cap binds only
 * while a group is behind: a paced group epoch closes when it has caught up, at about a thousand
 * records at 13,000 records/s, so it sets how much of a backlog one epoch takes (50,000 in one
 * Kafka transaction and one XA branch, so fewer epochs' fixed costs per record than at 20,000,
 * the cap of r7 and r12–r27 (r8–r11 ran 40,000); performance-history.md, 2026-12-05 23:37).
 */
export const DEFAULT_LATENCY_EPOCH = { maxRecords: 50000 };

const sameEpoch = (a: Record<string, unknown>, b: Record<string, unknown>) => {
  const x: Record<string, unknown> = { ...BASE_EPOCH, ...a };
  const y: Record<string, unknown> = { ...BASE_EPOCH, ...b };
  const keys = new Set([...Object.keys(x), ...Object.keys(y)]);
  return [...keys].every((k) => JSON.stringify(x[k]) === JSON.stringify(y[k]));
};

/**
 * The C runs of the throughput phase, in order: BENCH_EPOCHS (staged, eager), BENCH_DIRECT_EPOCHS
 * (MySQL direct), BENCH_NO_EAGER_EPOCHS (no eager dispatch), BENCH_C_VARIANTS, and one run at
 * the latency settings — unless one of the others has exactly those settings, which is then
 * marked as that run.
 */
export function cVariants(opts: BenchOptions): CVariant[] {
  const out: CVariant[] = [
    ...opts.epochSizes.map((n): CVariant => ({ label: `epoch.maxRecords ${n}`, epoch: { maxRecords: n } })),
    ...opts.directEpochSizes.map((n): CVariant => ({
      label: `epoch.maxRecords ${n}, MySQL direct`,
      epoch: { maxRecords: n },
      mysqlMode: 'direct',
    })),
    ...opts.noEagerEpochSizes.map((n): CVariant => ({
      label: `epoch.maxRecords ${n}, no eager activity dispatch`,
      epoch: { maxRecords: n },
      eager: false,
    })),
    ...(opts.extraVariants ?? []),
  ];
  const lat = opts.latencyEpoch ?? DEFAULT_LATENCY_EPOCH;
  const par = opts.latencyParallelism;
  const i = out.findIndex(
    (v) =>
      (v.mysqlMode ?? 'staged') === 'staged' &&
      v.eager !== false &&
      !v.specPadBytes &&
      !v.tree &&
      v.parallelism === par &&
      sameEpoch(v.epoch, lat),
  );
  if (i >= 0) out[i] = { ...out[i]!, latencySettings: true };
  else
    out.push({
      label: `latency settings (epoch ${JSON.stringify(lat)}${par ? `, parallelism ${par}` : ''})`,
      epoch: lat,
      ...(par ? { parallelism: par } : {}),
      latencySettings: true,
    });
  return out;
}

/** A count of partition groups as the bench takes it (BENCH_C_VARIANTS' parallelism, BENCH_LATENCY_PARALLELISM, BENCH_SCALE_PARALLELISM): an integer ≥ 1 (the spec's own validation bounds it above). */
const groupCount = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 1;

/** `raw` as the directory of another checkout of onceflow whose bench worker can run, or an error naming `field`. */
function checkout(field: string, raw: unknown): string {
  if (typeof raw === 'string' && raw && existsSync(join(resolve(raw), 'tools', 'bench', 'worker.ts')))
    return resolve(raw);
  throw new Error(
    `${field} is a checkout of onceflow (with tools/bench/worker.ts and node_modules), got ${JSON.stringify(raw)}`,
  );
}

/** BENCH_LATENCY_TREES: comma-separated checkouts (see checkout). */
export function parseTrees(field: string, raw: string): string[] {
  return raw
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)
    .map((x, i) => checkout(`${field}[${i}]`, x));
}

/** BENCH_C_VARIANTS: a JSON array of {label, epoch, mysqlMode?, eager?, parallelism?, specPadBytes?, tree?}. */
export function parseVariants(raw: string | undefined): CVariant[] {
  if (!raw || !raw.trim()) return [];
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (e) {
    throw new Error(`BENCH_C_VARIANTS is not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!Array.isArray(v))
    throw new Error(
      'BENCH_C_VARIANTS must be a JSON array of {label, epoch, mysqlMode?, eager?, parallelism?, specPadBytes?}',
    );
  return v.map((x: unknown, i): CVariant => {
    const o = x as Record<string, unknown>;
    if (!o || typeof o !== 'object' || typeof o.label !== 'string' || !o.label)
      throw new Error(`BENCH_C_VARIANTS[${i}]: needs a non-empty "label"`);
    if (!o.epoch || typeof o.epoch !== 'object' || Array.isArray(o.epoch))
      throw new Error(`BENCH_C_VARIANTS[${i}] (${o.label}): needs "epoch", an object merged into the spec's epoch`);
    if (o.mysqlMode !== undefined && o.mysqlMode !== 'staged' && o.mysqlMode !== 'direct')
      throw new Error(`BENCH_C_VARIANTS[${i}] (${o.label}): mysqlMode is 'staged' or 'direct'`);
    if (o.eager !== undefined && typeof o.eager !== 'boolean')
      throw new Error(`BENCH_C_VARIANTS[${i}] (${o.label}): eager is true or false`);
    if (o.parallelism !== undefined && !groupCount(o.parallelism))
      throw new Error(
        `BENCH_C_VARIANTS[${i}] (${o.label}): parallelism is the number of partition groups, an integer ≥ 1, got ${JSON.stringify(o.parallelism)}`,
      );
    if (
      o.specPadBytes !== undefined &&
      !(typeof o.specPadBytes === 'number' && Number.isInteger(o.specPadBytes) && o.specPadBytes >= 0)
    )
      throw new Error(
        `BENCH_C_VARIANTS[${i}] (${o.label}): specPadBytes is a number of bytes, an integer ≥ 0, got ${JSON.stringify(o.specPadBytes)}`,
      );
    if (o.tree !== undefined) checkout(`BENCH_C_VARIANTS[${i}] (${o.label}): tree`, o.tree);
    const known = new Set(['label', 'epoch', 'mysqlMode', 'eager', 'parallelism', 'specPadBytes', 'tree']);
    const extra = Object.keys(o).filter((k) => !known.has(k));
    if (extra.length) throw new Error(`BENCH_C_VARIANTS[${i}] (${o.label}): unknown field(s) ${extra.join(', ')}`);
    return {
      label: o.label,
      epoch: o.epoch as Record<string, unknown>,
      ...(o.mysqlMode ? { mysqlMode: o.mysqlMode } : {}),
      ...(o.eager !== undefined ? { eager: o.eager } : {}),
      ...(o.parallelism !== undefined ? { parallelism: o.parallelism } : {}),
      ...(o.specPadBytes ? { specPadBytes: o.specPadBytes } : {}),
      ...(o.tree ? { tree: resolve(o.tree as string) } : {}),
    };
  });
}

/** An env var holding a number of partition groups; empty or unset: `fallback`. */
function parseGroups(name: string, raw: string | undefined, fallback: number | undefined): number | undefined {
  if (raw === undefined) return fallback;
  if (!raw.trim()) return undefined;
  const n = Number(raw.trim());
  if (!groupCount(n))
    throw new Error(`${name} is a number of partition groups, an integer ≥ 1 (empty: none), got '${raw}'`);
  return n;
}

function parseEpoch(name: string, raw: string | undefined, fallback: Record<string, unknown>): Record<string, unknown> {
  if (raw === undefined || !raw.trim()) return fallback;
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (e) {
    throw new Error(`${name} is not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!v || typeof v !== 'object' || Array.isArray(v))
    throw new Error(`${name} must be a JSON object merged into the spec's epoch, e.g. {"maxRecords":5000}`);
  return v as Record<string, unknown>;
}

export interface PerfResult {
  recordsPerSec: number;
  mbPerSec: number;
  avgLatencyMs: number;
  p99LatencyMs: number;
  command: string;
}

/** EngineRun and LatencyRun carry the machine-speed gauge taken just before the run (cpuGauge; absent in results from before it, the CPU time before r18). */
export interface EngineRun extends Partial<Gauge> {
  records: number;
  /** records / (first record read → last output committed) */
  recordsPerSec: number;
  activeSeconds: number;
  /** start request → done, including startup */
  wallSeconds: number;
  cpuMs: number;
  /** CPU time of the engine process / its wall time while measured, in cores */
  cpuCores: number;
  cpuMsPer1kRecords: number;
  peakRssMb: number;
  /** event-loop delay of the engine process (p99, max ms) */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** the engine's CPU time split by thread, ms (ipc.ts ThreadCpu; absent in results from before it) */
  threadCpuMs?: ThreadCpu;
  /** CPU ms per 1,000 records spent by the services during the run (the engine's own is cpuMsPer1kRecords); a C run's Temporal figure includes its tail (temporalTailCpuMs) */
  servicesCpuMsPer1k: ServiceCpu;
  /** C: Temporal-server CPU ms in the wait after the run ended (BenchResult.temporalTailMs: its deferred timer tasks, and the server's idle work meanwhile); absent in results from before */
  temporalTailCpuMs?: number;
  /** InnoDB row lock waits during the run (global status delta): contention on the sink table's keys */
  rowLockWaits: number;
  rowLockWaitMs: number;
}

export interface CRun extends EngineRun {
  /** the variant's label (absent in results from before variants) */
  label?: string;
  /** the spec's epoch bounds of this run (absent in results from before variants) */
  epoch?: Record<string, unknown>;
  /** this run had exactly the latency phase's settings */
  latencySettings?: boolean;
  /** spec.parallelism of this run (absent: ungrouped) */
  parallelism?: number;
  /** filler bytes added to this run's spec (CVariant.specPadBytes; absent: none) */
  specPadBytes?: number;
  /** the checkout whose worker ran (CVariant.tree; absent: this one) and its commit */
  tree?: string;
  code?: string;
  epochMaxRecords: number;
  /**
   * records/s of the B runs just before and just after this C run (BenchOptions.bracketB), whose
   * mean `vsB` divides by; absent: vsB is against the one B run (results from before brackets).
   */
  bracketB?: [number, number];
  /** absent in results from before the option existed (those wrote directly) */
  mysqlMode?: 'staged' | 'direct';
  /** false: the worker took no activity task eagerly; absent in results from before the server allowed it */
  eagerActivities?: boolean;
  vsB: number;
  vsAPlain: number;
  vsATransactional: number;
  split: EpochSplit;
  verified: boolean;
  failedChecks: string[];
  /** per epoch: prepare end → first commit step start (activity completion, workflow task, dispatch, slot wait) */
  commitStartWaitMs?: Percentiles & { mean: number };
  /** workflow/activity tasks and history events per committed epoch (per committed group epoch when grouped), from the partition (or group) workflows' histories */
  temporal?: TemporalCost;
}

export interface LatencyRun extends Partial<Gauge> {
  engine: 'B' | 'C';
  /** source partitions (absent in results from before the scale phase: the run's partitions) */
  partitions?: number;
  rate: number;
  seconds: number;
  records: number;
  seen: number;
  /** of the records seen, appended after the warm-up */
  latencyMs: Percentiles;
  /** seconds of paced input before the measured `seconds` (absent in results from before it: none) */
  warmupSeconds?: number;
  /** of the warm-up's records seen (when warmupSeconds > 0) */
  warmupLatencyMs?: Percentiles;
  /** all records seen (warm-up included) by LATENCY_WINDOW_S-second window of their append time from the feed's start: whether the tail is the start's or spread over the run (absent in results from before it was measured) */
  latencyByWindow?: (Percentiles & { fromSec: number })[];
  /** the time allowed after the feed ended for every record to become visible, ms */
  limitMs?: number;
  /** not every record was visible within limitMs: the figures are of what was seen */
  timedOut?: boolean;
  /** records fed but not visible when the wait ended (0 when all were seen) */
  backlog?: number;
  /** feed end → last record visible (or → the limit), ms */
  drainMs?: number;
  /** C only: the spec's epoch bounds */
  epoch?: Record<string, unknown>;
  /** C only: the checkout whose worker ran (BENCH_LATENCY_TREES; absent: this one) and its commit */
  tree?: string;
  code?: string;
  /** C only: spec.parallelism (absent: ungrouped) */
  parallelism?: number;
  /** C only: worker processes (BENCH_LATENCY_WORKERS; absent: 1) and the partitions or groups each prepared */
  workers?: number;
  placement?: number[][];
  /** C only: mean prepare-start → next prepare-start per partition */
  epochIntervalMs?: number;
  split?: EpochSplit;
  commitStartWaitMs?: Percentiles & { mean: number };
  temporal?: TemporalCost;
  /** the services' round trips just before the run (absent in results from before it was measured) */
  serviceGauge?: ServiceGauge;
  /** CPU while the paced input was fed, in cores: the whole machine (of `machineCores`) and each service (absent in results from before it was measured) */
  feedCpu?: { machineCores: number; busyCores: number; services: ServiceCpu };
  verified?: boolean;
  failedChecks?: string[];
  /** C only, when it did not finish: how the pipeline was ended ('stopped': stop signal; 'terminated': did not stop in time) */
  ended?: 'drained' | 'stopped' | 'terminated';
  cpuCores: number;
  peakRssMb: number;
}

/** One partition count of the scale phase, ungrouped or (parallelism set) with partition groups. */
export interface ScaleRun {
  partitions: number;
  /** a repeat of the reference count's throughput runs (scaleBracket), made after the count before it; it has no latency runs */
  again?: true;
  /** C's spec.parallelism: a run of the grouped series (absent: the ungrouped series) */
  parallelism?: number;
  records: number;
  /** B at this partition count (B has no groups: a grouped row carries the ungrouped row's B) */
  B: EngineRun;
  C: EngineRun & {
    split: EpochSplit;
    verified: boolean;
    failedChecks: string[];
    commitStartWaitMs?: Percentiles & { mean: number };
    temporal?: TemporalCost;
  };
  /** B and C; a grouped row's has C only (B is the ungrouped row's) */
  latency: LatencyRun[];
}

export interface ScalePhase {
  partitions: number[];
  /** the grouped series' number of partition groups (absent: no grouped series) */
  parallelism?: number;
  records: number;
  /** C's epoch bounds (the latency settings) */
  epoch: Record<string, unknown>;
  /** the spec.parallelism of the grouped series' latency runs, when BENCH_LATENCY_PARALLELISM set it (else they use `parallelism`) */
  latencyParallelism?: number;
  latencyRate: number;
  latencySeconds: number;
  /** as BenchOptions.latencyWarmupSeconds */
  latencyWarmupSeconds?: number;
  /** the reference count ran again after every other count (BenchOptions.scaleBracket; absent in results from before it: each count once) */
  bracket?: true;
  /** in the order they ran */
  runs: ScaleRun[];
}

export interface BenchResult {
  date: string;
  label?: string;
  command: string;
  /** the commit of the checkout that ran, "+changes" when its src/ or tools/ differed from it (absent in results from before it was recorded) */
  code?: string;
  machine: { cpus: number; model: string; node: string; loadBefore: number[]; loadAfter: number[] };
  options: Omit<BenchOptions, 'log'>;
  A: { plain: PerfResult; transactional: PerfResult };
  B: EngineRun;
  /** records/s of every B run on the main data in order (the first is B; with bracketB one more after each C run) */
  Bruns?: number[];
  C: CRun[];
  latency: LatencyRun[];
  /** distinct row keys of the main data (absent in results from before it was counted: 432) */
  rowKeys?: number;
  /** the throughput and latency phases on distinct-key data (BenchOptions.distinctKeys; absent: not run) */
  distinct?: DataPhase;
  /** absent when the scale phase was skipped (and in results from before it) */
  scale?: ScalePhase;
  /** the worker's activity slots (ONCEFLOW_MAX_CONCURRENT_ACTIVITIES) in every C run */
  workerMaxConcurrentActivities?: number;
  /** the wait after every C run, in which its Temporal tail was measured (absent in results from before it was recorded: TEMPORAL_TAIL_MS) */
  temporalTailMs?: number;
  targets?: typeof TARGETS;
}

const optional = <K extends string>(k: K, v: number | undefined) =>
  v === undefined ? {} : ({ [k]: v } as Record<K, number>);

export function defaultOptions(env: NodeJS.ProcessEnv = process.env): BenchOptions {
  const num = (k: string, d: number) => (env[k] ? Number(env[k]) : d);
  return {
    records: num('BENCH_RECORDS', 500_000),
    partitions: num('BENCH_PARTITIONS', 4),
    recordBytes: 200,
    epochSizes: (env.BENCH_EPOCHS ?? '1000,5000,20000').split(',').filter(Boolean).map(Number),
    directEpochSizes: (env.BENCH_DIRECT_EPOCHS ?? '1000').split(',').filter(Boolean).map(Number),
    noEagerEpochSizes: (env.BENCH_NO_EAGER_EPOCHS ?? '1000').split(',').filter(Boolean).map(Number),
    extraVariants: parseVariants(env.BENCH_C_VARIANTS),
    latencyRate: num('BENCH_LATENCY_RATE', 13_000),
    latencySeconds: num('BENCH_LATENCY_SECONDS', 20),
    latencyWarmupSeconds: num('BENCH_LATENCY_WARMUP_SECONDS', 5),
    latencyEpoch: parseEpoch('BENCH_LATENCY_EPOCH', env.BENCH_LATENCY_EPOCH, DEFAULT_LATENCY_EPOCH),
    ...optional('latencyParallelism', parseGroups('BENCH_LATENCY_PARALLELISM', env.BENCH_LATENCY_PARALLELISM, 1)),
    ...optional('latencyWorkers', num('BENCH_LATENCY_WORKERS', 1)),
    ...(env.BENCH_LATENCY_TREES ? { latencyTrees: parseTrees('BENCH_LATENCY_TREES', env.BENCH_LATENCY_TREES) } : {}),
    scalePartitions: (env.BENCH_SCALE_PARTITIONS ?? '4,16,64,256')
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean)
      .map(Number),
    scaleRecords: num('BENCH_SCALE_RECORDS', 400_000),
    scaleLatencySeconds: num('BENCH_SCALE_LATENCY_SECONDS', 10),
    ...optional('scaleParallelism', parseGroups('BENCH_SCALE_PARALLELISM', env.BENCH_SCALE_PARALLELISM, 2)),
    ...(env.BENCH_SCALE_UNGROUPED === '0' ? { scaleUngrouped: false } : {}),
    ...optional(
      'scaleUngroupedMax',
      env.BENCH_SCALE_UNGROUPED_MAX === '' ? undefined : num('BENCH_SCALE_UNGROUPED_MAX', 64),
    ),
    scaleBracket: env.BENCH_SCALE_BRACKET !== '0',
    bracketB: env.BENCH_BRACKET_B !== '0',
    perfTransactionMs: num('BENCH_PERF_TRANSACTION_MS', 1000),
    distinctKeys: env.BENCH_DISTINCT !== '0',
    ...(env.BENCH_LABEL ? { label: env.BENCH_LABEL } : {}),
  };
}

/** Values of about `bytes` bytes: the demo's compare events plus padding, their row keys from `keys`. */
function benchValues(
  n: number,
  seed: number,
  bytes: number,
  keys: KeySpace = 'demo',
): { key: string; value: string }[] & { rowKeys: number } {
  const { values, input } = makeEvents(n, seed, 0, keys);
  const out = values.map((v) => {
    if (typeof v === 'string') throw new Error('no poison in benchmark data');
    const base = JSON.stringify({ ...v, pad: '' });
    return { key: v.id, value: JSON.stringify({ ...v, pad: 'x'.repeat(Math.max(0, bytes - base.length)) }) };
  });
  return Object.assign(out, { rowKeys: input.sums.size });
}

type Deps = Connections & { bundle: string; log: (line: string) => void; tailMs: number };

async function createTopics(admin: Admin, topics: string[], partitions: number, logAppendTime = false): Promise<void> {
  await createTopicsReady(
    admin,
    topics.map((topic) => ({
      topic,
      numPartitions: partitions,
      replicationFactor: -1,
      ...(logAppendTime ? { configEntries: [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] } : {}),
    })),
  );
  // A leader in the metadata is not yet a leader that answers: at 64 partitions ListOffsets
  // (produceRecords, the readers) was refused with NOT_LEADER_OR_FOLLOWER right after creation.
  for (const topic of topics) {
    for (let deadline = Date.now() + 60_000; ;) {
      try {
        await admin.fetchTopicOffsets(topic);
        break;
      } catch (e) {
        if (Date.now() > deadline) throw e;
        await sleep(200);
      }
    }
  }
}

/** An engine under test in its own process. */
class Child {
  readonly proc: ChildProcess;
  readonly events: unknown[] = [];
  private readyP: Promise<void>;
  private usageP: Promise<Usage>;
  private failure: Error | undefined;

  /** `root`: the checkout whose tools/bench/`file` runs (CVariant.tree; default this one). */
  constructor(file: string, env: Record<string, string>, root = ROOT) {
    // BENCH_CPU_PROF=<dir>: each engine process writes a V8 CPU profile there when it exits (open it in Chrome's DevTools).
    const prof = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
    // BENCH_HEAP_SAMPLE=<dir>: each engine process writes there, by allocation site, what outlived its young generation (./heap-sample.cjs).
    const heap = process.env.BENCH_HEAP_SAMPLE ? ['--require', join(ROOT, 'tools', 'bench', 'heap-sample.cjs')] : [];
    // BENCH_NODE_ARGS: more node flags for every engine process (e.g. --trace-gc, V8 heap sizes).
    const extra = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
    const args = [...prof, ...heap, ...extra, '--import', 'tsx', join(root, 'tools', 'bench', file)];
    this.proc = spawn(process.execPath, args, {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let ready!: () => void;
    let usage!: (u: Usage) => void;
    let fail!: (e: Error) => void;
    this.readyP = new Promise<void>((res, rej) => {
      ready = res;
      fail = rej;
    });
    this.usageP = new Promise<Usage>((res) => (usage = res));
    this.proc.on('message', (m: FromChild) => {
      if (m.type === 'ready') ready();
      else if (m.type === 'event') this.events.push(m.event);
      else if (m.type === 'usage') usage(m.usage);
      else if (m.type === 'error') {
        this.failure = new Error(`${file}: ${m.message}`);
        fail(this.failure);
      }
    });
    this.proc.on('exit', (code) => fail(new Error(`${file} exited with ${code} before it was ready`)));
  }

  ready(): Promise<void> {
    return this.readyP;
  }

  send(m: ToChild): void {
    this.proc.send(m);
  }

  check(): void {
    if (this.failure) throw this.failure;
  }

  async stop(): Promise<Usage> {
    this.send({ type: 'stop' });
    const u = await Promise.race([this.usageP, limit(60_000)]);
    if (!u) {
      this.proc.kill('SIGKILL');
      throw new Error('engine process did not stop within 60 s');
    }
    await new Promise((r) => (this.proc.exitCode !== null ? r(null) : this.proc.once('exit', r)));
    return u;
  }
}

/** C's worker processes on one task queue (BENCH_LATENCY_WORKERS): events merged, usage summed (CPU) or maxed (wall, delays). */
class Workers {
  constructor(readonly all: Child[]) {}

  get events(): unknown[] {
    return this.all.flatMap((c) => c.events);
  }

  /** The partitions (or groups) each process prepared epochs of. */
  placement(): number[][] {
    return this.all.map((c) =>
      [
        ...new Set(
          (c.events as ObservedEvent[]).flatMap((e) => (e.kind === 'prepared' ? [e.group ?? e.partition] : [])),
        ),
      ].sort((a, b) => a - b),
    );
  }

  send(m: ToChild): void {
    for (const c of this.all) c.send(m);
  }

  check(): void {
    for (const c of this.all) c.check();
  }

  async stop(): Promise<Usage> {
    const us = await Promise.all(this.all.map((c) => c.stop()));
    const max = (k: 'wallMs' | 'loopDelayP99Ms' | 'loopDelayMaxMs') => Math.max(...us.map((u) => u[k]));
    return {
      cpuMs: us.reduce((a, u) => a + u.cpuMs, 0),
      wallMs: max('wallMs'),
      peakRssMb: us.reduce((a, u) => a + u.peakRssMb, 0),
      loopDelayP99Ms: max('loopDelayP99Ms'),
      loopDelayMaxMs: max('loopDelayMaxMs'),
      threads: us.every((u) => u.threads)
        ? {
            main: us.reduce((a, u) => a + u.threads!.main, 0),
            core: us.reduce((a, u) => a + u.threads!.core, 0),
            others: us.flatMap((u) => u.threads!.others).sort((a, b) => b - a),
          }
        : undefined,
    };
  }
}

function runPerf(libs: string, brokers: string, topic: string, n: number, bytes: number, txnMs?: number): PerfResult {
  const args = [
    '-Xmx512m',
    '-cp',
    `${libs}/*`,
    'org.apache.kafka.tools.ProducerPerformance',
    '--topic',
    topic,
    '--num-records',
    String(n),
    '--record-size',
    String(bytes),
    '--throughput',
    '-1',
    '--producer-props',
    `bootstrap.servers=${brokers}`,
    'acks=all',
    ...(txnMs ? ['--transactional-id', `${topic}-txn`, '--transaction-duration-ms', String(txnMs)] : []),
  ];
  const r = spawnSync('java', args, { encoding: 'utf8', timeout: 600_000, maxBuffer: 64 << 20 });
  const out = `${r.stdout ?? ''}\n${r.stderr ?? ''}`;
  const m =
    /(\d+) records sent, ([\d.]+) records\/sec \(([\d.]+) MB\/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency(?:, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th)?/.exec(
      out,
    );
  if (r.status !== 0 || !m) throw new Error(`ProducerPerformance failed (exit ${r.status}):\n${out.slice(-3000)}`);
  return {
    recordsPerSec: Number(m[2]),
    mbPerSec: Number(m[3]),
    avgLatencyMs: Number(m[4]),
    p99LatencyMs: Number(m[8] ?? NaN),
    command: `java -cp "$ONCEFLOW_KAFKA_LIBS/*" ${args.slice(3).join(' ')}`,
  };
}

export interface ServiceCpu {
  temporal: number;
  kafka: number;
  mariadb: number;
}

/** CPU time of the whole machine since boot, ms: busy (all but idle and iowait) and total, from /proc/stat. */
function machineCpu(): { busyMs: number; totalMs: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busyMs: ((total - f[3]! - f[4]!) * 1000) / 100, totalMs: (total * 1000) / 100 }; // clock ticks of 10 ms
}

/** Cores busy between two readings: the machine's, and each service's. */
function cpuBetween(
  a: { machine: ReturnType<typeof machineCpu>; services: ServiceCpu; at: number },
  b: typeof a,
): NonNullable<LatencyRun['feedCpu']> {
  const wall = b.at - a.at;
  const cores = (k: keyof ServiceCpu) => (b.services[k] - a.services[k]) / wall;
  return {
    machineCores: cpus().length,
    busyCores: ((b.machine.busyMs - a.machine.busyMs) / (b.machine.totalMs - a.machine.totalMs)) * cpus().length,
    services: { temporal: cores('temporal'), kafka: cores('kafka'), mariadb: cores('mariadb') },
  };
}

const cpuNow = () => ({ machine: machineCpu(), services: serviceCpu(), at: Date.now() });

/** CPU time (ms) used so far by the stack's servers, found by their command lines naming the run directory. */
function serviceCpu(): ServiceCpu {
  const dir = runDir();
  const out: ServiceCpu = { temporal: 0, kafka: 0, mariadb: 0 };
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!cmd.includes(`${dir}/`)) continue;
      const kind: keyof ServiceCpu | undefined = cmd.includes('kafka.Kafka')
        ? 'kafka'
        : cmd.includes('mariadbd')
          ? 'mariadb'
          : cmd.includes('start-dev')
            ? 'temporal'
            : undefined;
      if (!kind) continue;
      out[kind] += statCpuMs(readFileSync(`/proc/${pid}/stat`, 'utf8'));
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}

interface LockStatus {
  waits: number;
  ms: number;
}

interface Probe {
  locks: LockStatus;
  cpu: ServiceCpu;
  gauge?: Gauge;
}

/** Before a run (`gauge`: with the machine-speed gauge, taken first) or after it. */
async function probe(pool: Pool, gauge = false): Promise<Probe> {
  return { ...(gauge ? { gauge: cpuGauge() } : {}), locks: await rowLocks(pool), cpu: serviceCpu() };
}

export interface Gauge {
  gaugeMs: number;
  gaugeCpuMs: number;
}

const GAUGE_DATA = Array.from({ length: 2000 }, (_, i) => ({
  id: `e${i}`,
  n: i,
  at: 1_700_000_000_000 + i,
  tags: ['a', 'b', String(i % 7)],
  pad: 'x'.repeat(120),
}));
const GAUGE_BYTES = Buffer.alloc(4 << 20, 7);

/**
 * The machine's speed now: a fixed CPU task in the bench process (JSON round trips of 2,000 small
 * objects ten times, SHA-256 over 4 MiB), five times; the least wall time (gaugeMs) and the least
 * CPU time the process spent on it (gaugeCpuMs), in ms. The same work on every call: a higher
 * wall time is a slower CPU or one still busy with something else (the previous run's
 * leftovers, another process); a higher CPU time is a slower CPU for this process (a busy
 * sibling thread, a throttled or shared core), whatever else runs. This machine's speed drifts
 * by up to a half within an hour; the two figures say what a run started on, and which kind.
 */
export function cpuGauge(): Gauge {
  let wall = Infinity;
  let cpu = Infinity;
  for (let k = 0; k < 5; k++) {
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    let n = 0;
    for (let i = 0; i < 10; i++) n += (JSON.parse(JSON.stringify(GAUGE_DATA)) as unknown[]).length;
    const digest = createHash('sha256').update(GAUGE_BYTES).digest('hex');
    const c = process.cpuUsage(c0);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (n !== 20_000 || digest.length !== 64) throw new Error('cpuGauge: the fixed task did not run');
    wall = Math.min(wall, ms);
    cpu = Math.min(cpu, (c.user + c.system) / 1000);
  }
  return { gaugeMs: wall, gaugeCpuMs: cpu };
}

async function rowLocks(pool: Pool): Promise<LockStatus> {
  const [rows] = await pool.query(
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', 'Innodb_row_lock_time')",
  );
  const get = (n: string) =>
    Number((rows as { Variable_name: string; Value: string }[]).find((r) => r.Variable_name === n)?.Value ?? NaN);
  return { waits: get('Innodb_row_lock_waits'), ms: get('Innodb_row_lock_time') };
}

function engineRun(
  records: number,
  firstAt: number,
  lastAt: number,
  startedAt: number,
  doneAt: number,
  u: Usage,
  probes: [Probe, Probe],
): EngineRun {
  const [a, b] = probes;
  const per1k = (k: keyof ServiceCpu) => ((b.cpu[k] - a.cpu[k]) / records) * 1000;
  const active = (lastAt - firstAt) / 1000;
  return {
    records,
    recordsPerSec: records / active,
    activeSeconds: active,
    wallSeconds: (doneAt - startedAt) / 1000,
    cpuMs: u.cpuMs,
    cpuCores: u.cpuMs / u.wallMs,
    cpuMsPer1kRecords: (u.cpuMs / records) * 1000,
    peakRssMb: u.peakRssMb,
    loopDelayP99Ms: u.loopDelayP99Ms,
    loopDelayMaxMs: u.loopDelayMaxMs,
    threadCpuMs: u.threads,
    servicesCpuMsPer1k: { temporal: per1k('temporal'), kafka: per1k('kafka'), mariadb: per1k('mariadb') },
    rowLockWaits: b.locks.waits - a.locks.waits,
    rowLockWaitMs: b.locks.ms - a.locks.ms,
    ...a.gauge,
  };
}

function specFor(
  name: string,
  source: string,
  epoch: Record<string, unknown>,
  mode: 'staged' | 'direct' = 'staged',
  parallelism?: number,
  padBytes = 0,
): PipelineSpec {
  const spec = compareSpec({
    name,
    source: { topic: source },
    kafkaSink: { topic: `${name}.out` },
    // Fields unknown to the spec (a variant's) reach its validation, which names them; so does a parallelism above its limit.
    epoch: { ...BASE_EPOCH, ...epoch } as Partial<EpochBounds>,
    ...(parallelism !== undefined ? { parallelism } : {}),
    transformOptions: {
      table: `t_${name.replace(/[^a-z0-9]/g, '_')}`,
      ...(padBytes ? { pad: 'x'.repeat(padBytes) } : {}),
    },
  });
  return { ...spec, mysqlSink: { ...spec.mysqlSink, mode } };
}

/**
 * Watches output partitions with read_committed and stamps when each source record's output
 * became visible. One Fetch for all partitions per leader (fetchPartitions, maxWait 100 ms): a
 * broker answers the requests of one connection in order, so one long-polling fetch per
 * partition would make each partition wait for the others' polls (at 64 idle partitions, 6.4 s
 * per round). Control records and aborted transactions' records are never visible.
 */
function watchOutputs(cluster: KafkaCluster, topic: string, partitions: number) {
  const visible = new Map<string, number>();
  const next = Array.from({ length: partitions }, () => 0);
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      try {
        const results = await fetchPartitions(
          cluster,
          next.map((fromOffset, partition) => ({ topic, partition, fromOffset })),
          { maxBytes: 4 << 20, maxWaitMs: 100, isolation: ISOLATION.READ_COMMITTED },
        );
        const now = Date.now();
        results.forEach((r, p) => {
          for (const rec of r.records) {
            const src = (JSON.parse(rec.value?.toString('utf8') ?? '{}') as { src?: string }).src;
            if (src && !visible.has(src)) visible.set(src, now);
          }
          next[p] = Math.max(next[p]!, r.nextOffset);
        });
      } catch {
        // e.g. UNKNOWN_TOPIC_OR_PARTITION while a new topic's metadata propagates: poll again
        await sleep(50);
      }
    }
  })();
  return {
    visible,
    async stop() {
      stop = true;
      await loop;
    },
  };
}

async function sourceAppendTimes(
  cluster: KafkaCluster,
  topic: string,
  partitions: number,
): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (let p = 0; p < partitions; p++) {
    for (const r of await readAll(cluster, topic, p, ISOLATION.READ_COMMITTED))
      out.set(`${p}:${r.offset}`, Number(r.timestamp));
  }
  return out;
}

async function waitFor(
  what: string,
  fn: () => boolean,
  timeoutMs: number,
  check: () => void = () => undefined,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    check();
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

export async function runBench(opts: BenchOptions): Promise<BenchResult> {
  const log = opts.log ?? ((l: string) => process.stderr.write(`[bench] ${l}\n`));
  const settings = loadSettings();
  const libs = toolPaths().kafkaLibs;
  if (!libs || !existsSync(libs))
    throw new Error('the Kafka jars (ONCEFLOW_KAFKA_LIBS) were not found; run scripts/services.sh up first');
  const latencyEpoch = opts.latencyEpoch ?? DEFAULT_LATENCY_EPOCH;
  const scaleP = opts.scalePartitions ?? [];
  for (const p of scaleP)
    if (!Number.isInteger(p) || p < 1) throw new Error(`BENCH_SCALE_PARTITIONS: '${p}' is not a partition count`);
  const variants = cVariants(opts);
  // Every spec is validated before anything is measured: a variant's unknown field fails now, not after A and B.
  for (const v of variants) specFor('bench-check', 'bench-check', v.epoch, v.mysqlMode, v.parallelism);
  const latencyParallelism = opts.latencyParallelism;
  const scaleGroups = scaleP.length > 0 ? opts.scaleParallelism : undefined;
  const ungrouped = opts.scaleUngrouped !== false;
  if (scaleP.length > 0 && !ungrouped && !scaleGroups)
    throw new Error('BENCH_SCALE_UNGROUPED=0 needs BENCH_SCALE_PARALLELISM: the scale phase would run no C at all');
  const ungroupedMax = opts.scaleUngroupedMax ?? Infinity;
  if (!(ungroupedMax >= 1))
    throw new Error(`BENCH_SCALE_UNGROUPED_MAX: '${opts.scaleUngroupedMax}' is not a partition count`);
  const above = scaleP.filter((p) => p > ungroupedMax);
  if (above.length && !scaleGroups)
    throw new Error(
      `BENCH_SCALE_PARTITIONS ${above.join(', ')} is above BENCH_SCALE_UNGROUPED_MAX (${ungroupedMax}) and BENCH_SCALE_PARALLELISM is empty: no C would run there; raise the one or set the other`,
    );
  for (const [what, g] of [
    ['BENCH_LATENCY_PARALLELISM', latencyParallelism],
    ['BENCH_SCALE_PARALLELISM', scaleGroups],
  ] as const) {
    if (g === undefined) continue;
    if (!groupCount(g)) throw new Error(`${what}: '${g}' is not a number of partition groups (an integer ≥ 1)`);
    specFor('bench-check', 'bench-check', latencyEpoch, 'staged', g);
  }
  let bundle = process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '';
  if (!bundle || !existsSync(bundle)) bundle = bundleOf(ROOT);
  // Other checkouts' bundles too, before anything is measured.
  for (const tree of [...variants.flatMap((v) => v.tree ?? []), ...(opts.latencyTrees ?? [])]) bundleOf(tree);
  const connections = await openConnections(settings, 'onceflow-bench');
  const { kafka, admin } = connections;
  const deps: Deps = { ...connections, bundle, log, tailMs: opts.temporalTailMs ?? TEMPORAL_TAIL_MS };
  const id = `b${Date.now().toString(36)}`;
  const loadBefore = loadavg();
  const code = commitOf(ROOT);
  const created: PipelineSpec[] = [];
  try {
    const { records: N, partitions: P } = opts;
    const source = `${id}.in`;
    await createTopics(admin, [source], P, true);
    const values = benchValues(N, 2019, opts.recordBytes);
    log(`producing ${N} records of ~${opts.recordBytes} bytes to ${source} (${P} partitions)`);
    await produceRecords(kafka, source, P, values);

    log('A: ProducerPerformance, plain and transactional');
    await createTopics(admin, [`${id}.perf`, `${id}.perftx`], P);
    const brokers = settings.kafka.brokers.join(',');
    // A short unreported run first: JVM, broker and page cache warm-up would otherwise land on 'plain'.
    await createTopics(admin, [`${id}.warmup`], P);
    runPerf(libs, brokers, `${id}.warmup`, Math.min(N, 100_000), opts.recordBytes);
    const plain = runPerf(libs, brokers, `${id}.perf`, N, opts.recordBytes);
    log(`A plain: ${plain.recordsPerSec.toFixed(0)} records/s`);
    const transactional = runPerf(libs, brokers, `${id}.perftx`, N, opts.recordBytes, opts.perfTransactionMs);
    log(`A transactional: ${transactional.recordsPerSec.toFixed(0)} records/s`);

    const phaseDeps = { ...deps, id, created };
    const main = await dataPhase(phaseDeps, opts, { tag: '', keys: 'demo', source, plain, transactional, variants });
    const { B, Bruns, C, latency, rate } = main;
    const warmup = opts.latencyWarmupSeconds ?? 0;
    let distinct: DataPhase | undefined;
    if (opts.distinctKeys) {
      const dsource = `${id}.din`;
      await createTopics(admin, [dsource], P, true);
      const dvalues = benchValues(N, 2019, opts.recordBytes, 'distinct');
      log(`distinct keys: producing ${N} records with ${dvalues.rowKeys} row keys to ${dsource}`);
      await produceRecords(kafka, dsource, P, dvalues);
      const d = await dataPhase(phaseDeps, opts, {
        tag: 'd',
        keys: 'distinct',
        source: dsource,
        plain,
        transactional,
        variants,
        rate,
      });
      distinct = { keys: 'distinct', rowKeys: dvalues.rowKeys, B: d.B, Bruns: d.Bruns, C: d.C, latency: d.latency };
    }
    let scale: ScalePhase | undefined;
    if (scaleP.length > 0) {
      const SN = opts.scaleRecords ?? 200_000;
      const seconds = opts.scaleLatencySeconds ?? 10;
      const scaleValues = benchValues(SN, 2020, opts.recordBytes);
      const runs: ScaleRun[] = [];
      // With the bracket, the reference count (the first) runs again after every other count: 4, 16, 4, 64, 4.
      const order = scaleP.flatMap((sp, k) =>
        k > 0 && opts.scaleBracket
          ? [
              { sp, again: false },
              { sp: scaleP[0]!, again: true },
            ]
          : [{ sp, again: false }],
      );
      for (const [k, { sp, again }] of order.entries()) {
        const src = `${id}.s${sp}.in`;
        if (!again) {
          await createTopics(admin, [src], sp, true);
          log(`scale, ${sp} partitions: producing ${SN} records to ${src}`);
          await produceRecords(kafka, src, sp, scaleValues);
        }
        // A repeat's pipelines get names of their own (their own consumer group, progress topic and ledger rows).
        const run = `s${sp}${again ? `r${k}` : ''}`;
        const bs = specFor(`${id}-${run}b`, src, { maxRecords: 5000 });
        created.push(bs);
        const sB = await runBaseline(deps, bs, SN, sp);
        log(`scale ${sp}${again ? ' again' : ''} B: ${sB.recordsPerSec.toFixed(0)} records/s`);
        // The ungrouped series (one workflow per partition; not with BENCH_SCALE_UNGROUPED=0, nor above BENCH_SCALE_UNGROUPED_MAX), then the grouped one (scaleGroups partition groups) on the same data.
        const series = [...(ungrouped && sp <= ungroupedMax ? [undefined] : []), ...(scaleGroups ? [scaleGroups] : [])];
        for (const [i, groups] of series.entries()) {
          const tag = groups ? `g${groups}` : '';
          const at = `scale ${sp}${again ? ' again' : ''}${groups ? `, ${groups} groups` : ''}`;
          const cs = specFor(`${id}-${run}${tag}c`, src, latencyEpoch, 'staged', groups);
          created.push(cs);
          const c = await runOnceflow(deps, cs, SN, sp, true);
          log(
            `${at} C: ${c.run.recordsPerSec.toFixed(0)} records/s, Temporal CPU ${c.run.servicesCpuMsPer1k.temporal.toFixed(1)} ms/1k, verified: ${c.verified ? 'exactly once' : `FAILED ${c.failedChecks.join('; ')}`}`,
          );
          const lat: LatencyRun[] = [];
          // B has no groups: its latency is measured once per partition count, with the first series; a repeat measures none.
          for (const engine of again ? [] : i > 0 ? (['C'] as const) : (['B', 'C'] as const)) {
            const l = await runLatency(
              deps,
              {
                engine,
                name: `${id}-s${sp}${tag}l${engine.toLowerCase()}`,
                rate,
                seconds,
                warmupSeconds: warmup,
                partitions: sp,
                epoch: latencyEpoch,
                parallelism: groups ? (latencyParallelism ?? groups) : undefined,
                recordBytes: opts.recordBytes,
              },
              created,
            );
            lat.push(l);
            log(`${at} latency ${engine}: ${latencyLine(l)}`);
          }
          runs.push({
            partitions: sp,
            ...(again ? { again: true as const } : {}),
            ...(groups ? { parallelism: groups } : {}),
            records: SN,
            B: sB,
            C: {
              ...c.run,
              split: c.split,
              verified: c.verified,
              failedChecks: c.failedChecks,
              commitStartWaitMs: c.commitStartWaitMs,
              ...(c.temporal ? { temporal: c.temporal } : {}),
            },
            latency: lat,
          });
        }
      }
      scale = {
        partitions: scaleP,
        ...(scaleGroups ? { parallelism: scaleGroups, ...(latencyParallelism ? { latencyParallelism } : {}) } : {}),
        records: SN,
        epoch: { ...BASE_EPOCH, ...latencyEpoch },
        latencyRate: rate,
        latencySeconds: seconds,
        latencyWarmupSeconds: warmup,
        ...(opts.scaleBracket && scaleP.length > 1 ? { bracket: true as const } : {}),
        runs,
      };
    }
    return {
      date: new Date().toISOString(),
      ...(opts.label ? { label: opts.label } : {}),
      command: 'npm run bench',
      ...optionalCode(code),
      machine: {
        cpus: cpus().length,
        model: cpus()[0]?.model ?? '?',
        node: process.version,
        loadBefore,
        loadAfter: loadavg(),
      },
      options: {
        records: opts.records,
        partitions: opts.partitions,
        recordBytes: opts.recordBytes,
        epochSizes: opts.epochSizes,
        directEpochSizes: opts.directEpochSizes,
        noEagerEpochSizes: opts.noEagerEpochSizes,
        extraVariants: opts.extraVariants ?? [],
        latencyRate: rate,
        latencySeconds: opts.latencySeconds,
        latencyWarmupSeconds: warmup,
        latencyEpoch: { ...BASE_EPOCH, ...latencyEpoch },
        ...(latencyParallelism ? { latencyParallelism } : {}),
        scalePartitions: scaleP,
        ...(scaleGroups ? { scaleParallelism: scaleGroups } : {}),
        ...(opts.scaleUngroupedMax !== undefined ? { scaleUngroupedMax: opts.scaleUngroupedMax } : {}),
        ...(scale
          ? {
              scaleRecords: scale.records,
              scaleLatencySeconds: scale.latencySeconds,
              ...(scale.bracket ? { scaleBracket: true } : {}),
            }
          : {}),
        ...(opts.bracketB ? { bracketB: true } : {}),
        perfTransactionMs: opts.perfTransactionMs,
        ...(opts.distinctKeys ? { distinctKeys: true } : {}),
        ...(opts.label ? { label: opts.label } : {}),
      },
      A: { plain, transactional },
      B,
      Bruns,
      C,
      latency,
      rowKeys: values.rowKeys,
      ...(distinct ? { distinct } : {}),
      ...(scale ? { scale } : {}),
      workerMaxConcurrentActivities: settings.maxConcurrentActivities,
      temporalTailMs: deps.tailMs,
      targets: TARGETS,
    };
  } finally {
    await cleanup(deps, id, created).catch((e) => log(`cleanup: ${String(e)}`));
    await connections.close();
  }
}

/** One data set's throughput and latency phases (B, the C variants with B bracketing each, then latency B and C). */
export interface DataPhase {
  keys: KeySpace;
  /** distinct row keys (slot_time, key1, key2, key3) among the phase's records */
  rowKeys: number;
  B: EngineRun;
  /** records/s of every B run on this data in order (the first is B) */
  Bruns: number[];
  C: CRun[];
  latency: LatencyRun[];
}

interface PhaseArgs {
  /** added to the pipelines' names ('' for the bench's data, 'd' for distinct keys) */
  tag: string;
  keys: KeySpace;
  source: string;
  plain: PerfResult;
  transactional: PerfResult;
  variants: CVariant[];
  /** the latency phase's rate; absent: from opts (0: half the slower of B and the best C) */
  rate?: number;
}

async function dataPhase(
  deps: Deps & { id: string; created: PipelineSpec[] },
  opts: BenchOptions,
  a: PhaseArgs,
): Promise<Omit<DataPhase, 'keys' | 'rowKeys'> & { rate: number }> {
  const { log, id, created } = deps;
  const { records: N, partitions: P } = opts;
  const { source, plain, transactional, tag } = a;
  const on = a.keys === 'demo' ? '' : ` (${a.keys} keys)`;
  log(`B${on}: at-least-once baseline`);
  const bSpec = specFor(`${id}-${tag}b`, source, { maxRecords: 5000 });
  created.push(bSpec);
  const B = await runBaseline(deps, bSpec, N, P);
  log(`B${on}: ${B.recordsPerSec.toFixed(0)} records/s`);
  const Bruns = [B.recordsPerSec];
  /** B once more on this data (bracketB: after each C run), in a consumer group and sinks of its own. */
  const nextB = async (i: number): Promise<number> => {
    const spec = specFor(`${id}-${tag}b${i}`, source, { maxRecords: 5000 });
    created.push(spec);
    const b = (await runBaseline(deps, spec, N, P)).recordsPerSec;
    Bruns.push(b);
    return b;
  };

  const C: CRun[] = [];
  for (const [i, v] of a.variants.entries()) {
    const mode = v.mysqlMode ?? 'staged';
    const eager = v.eager !== false;
    const spec = specFor(`${id}-${tag}c${i}`, source, v.epoch, mode, v.parallelism, v.specPadBytes);
    created.push(spec);
    log(
      `C${on}: onceflow exactly-once, ${v.label} (epoch ${JSON.stringify(spec.epoch)}, MySQL ${mode}${eager ? '' : ', no eager activities'}${spec.parallelism ? `, parallelism ${spec.parallelism}` : ''}${v.specPadBytes ? `, spec padded by ${v.specPadBytes} B` : ''}${v.tree ? `, worker of ${v.tree}` : ''})`,
    );
    const c = await runOnceflow(deps, spec, N, P, eager, v.tree);
    const before = Bruns[Bruns.length - 1]!;
    const bracket: [number, number] | undefined = opts.bracketB ? [before, await nextB(i + 1)] : undefined;
    const baseline = bracket ? (bracket[0] + bracket[1]) / 2 : B.recordsPerSec;
    const run: CRun = {
      ...c.run,
      label: v.label,
      epoch: { ...spec.epoch },
      ...(v.latencySettings ? { latencySettings: true } : {}),
      ...(spec.parallelism ? { parallelism: spec.parallelism } : {}),
      ...(v.specPadBytes ? { specPadBytes: v.specPadBytes } : {}),
      ...(v.tree ? { tree: v.tree, ...optionalCode(commitOf(v.tree)) } : {}),
      epochMaxRecords: spec.epoch.maxRecords,
      mysqlMode: mode,
      eagerActivities: eager,
      vsB: c.run.recordsPerSec / baseline,
      ...(bracket ? { bracketB: bracket } : {}),
      vsAPlain: c.run.recordsPerSec / plain.recordsPerSec,
      vsATransactional: c.run.recordsPerSec / transactional.recordsPerSec,
      split: c.split,
      verified: c.verified,
      failedChecks: c.failedChecks,
      commitStartWaitMs: c.commitStartWaitMs,
      ...(c.temporal ? { temporal: c.temporal } : {}),
    };
    C.push(run);
    log(
      `C${on} ${v.label}: ${run.recordsPerSec.toFixed(0)} records/s (C/B ${run.vsB.toFixed(2)}${bracket ? `; B before and after ${bracket.map((x) => x.toFixed(0)).join(' and ')}` : ''}), verified: ${run.verified ? 'exactly once' : `FAILED ${run.failedChecks.join('; ')}`}`,
    );
  }

  const bestC = Math.max(...C.map((c) => c.recordsPerSec));
  const rate =
    a.rate ??
    (opts.latencyRate > 0
      ? opts.latencyRate
      : Math.max(100, Math.round((0.5 * Math.min(bestC, B.recordsPerSec)) / 100) * 100));
  const latency: LatencyRun[] = [];
  const warmup = opts.latencyWarmupSeconds ?? 0;
  const runs: { engine: 'B' | 'C'; tree?: string }[] = [
    { engine: 'B' },
    { engine: 'C' },
    ...(opts.latencyTrees ?? []).map((tree) => ({ engine: 'C' as const, tree })),
  ];
  for (const [k, { engine, tree }] of runs.entries()) {
    log(
      `latency${on}: ${engine}${tree ? ` (worker of ${tree})` : ''} at ${rate} records/s for ${warmup} s of warm-up and ${opts.latencySeconds} s measured`,
    );
    const l = await runLatency(
      deps,
      {
        engine,
        name: `${id}-${tag}l${engine.toLowerCase()}${k > 1 ? k : ''}`,
        ...(tree ? { tree } : {}),
        rate,
        seconds: opts.latencySeconds,
        warmupSeconds: warmup,
        partitions: P,
        epoch: opts.latencyEpoch ?? DEFAULT_LATENCY_EPOCH,
        parallelism: opts.latencyParallelism,
        ...(engine === 'C' ? { workers: opts.latencyWorkers } : {}),
        recordBytes: opts.recordBytes,
        keys: a.keys,
      },
      created,
    );
    latency.push(l);
    log(`latency${on} ${engine}: ${latencyLine(l)}`);
  }
  return { B, Bruns, C, latency, rate };
}

function latencyLine(l: LatencyRun): string {
  const seen = `${l.seen}/${l.records} seen`;
  return `p50 ${l.latencyMs.p50} ms, p99 ${l.latencyMs.p99} ms (${seen}${l.timedOut ? `, NOT ALL within ${(l.limitMs ?? 0) / 1000} s after the feed: backlog ${l.backlog}` : ''})${l.verified === undefined ? '' : l.verified ? ', verified' : `, verification FAILED ${(l.failedChecks ?? []).join('; ')}`}`;
}

async function cleanup(deps: Deps, id: string, specs: PipelineSpec[]): Promise<void> {
  const topics = (await deps.admin.listTopics()).filter(
    (t) => t.startsWith(`${id}.`) || t.startsWith(`${id}-`) || t.startsWith(`onceflow.progress.${id}`),
  );
  if (topics.length) await deps.admin.deleteTopics({ topics, timeout: 60_000 }).catch(() => undefined);
  for (const s of specs) {
    await dropPipelineTables(deps.pool, s);
  }
}

async function runBaseline(deps: Deps, spec: PipelineSpec, n: number, partitions: number): Promise<EngineRun> {
  await createTopics(deps.admin, [spec.kafkaSink.topic, spec.deadLetterTopic], partitions);
  const child = new Child('baseline.ts', {});
  await child.ready();
  const locks0 = await probe(deps.pool, true);
  child.send({ type: 'mark' });
  const startedAt = Date.now();
  child.send({ type: 'start', args: { spec, groupId: `${spec.name}-group`, partitions } satisfies BaselineArgs });
  const batches = () => child.events as BaselineBatch[];
  const count = () => batches().reduce((a, b) => a + b.records, 0);
  await waitFor(
    `baseline to process ${n} records`,
    () => count() >= n,
    900_000,
    () => child.check(),
  );
  const doneAt = Date.now();
  const locks1 = await probe(deps.pool);
  const u = await child.stop();
  // reduce, not spread: a long run has more batches than call-stack arguments
  const firstAt = batches().reduce((a, b) => Math.min(a, b.readAt), Infinity);
  const lastAt = batches().reduce((a, b) => Math.max(a, b.doneAt), -Infinity);
  return engineRun(count(), firstAt, lastAt, startedAt, doneAt, u, [locks0, locks1]);
}

/** Bundles the workflows of a checkout (this one's is `deps.bundle`), once per checkout. */
const bundles = new Map<string, string>();
function bundleOf(root: string): string {
  let out = bundles.get(root);
  if (out) return out;
  out = join(mkdtempSync(join(tmpdir(), 'onceflow-bench-')), 'workflow-bundle.js');
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'scripts', 'bundle-workflows.ts'), out], {
    cwd: root,
    stdio: 'inherit',
  });
  if (r.status !== 0) throw new Error(`bundling the workflows of ${root} failed`);
  bundles.set(root, out);
  return out;
}

const optionalCode = (code: string | undefined) => (code ? { code } : {});

/** The commit a checkout is at (CRun.code, BenchResult.code), "+changes" when its src/ or tools/ differ from it; undefined where git cannot say. */
function commitOf(root: string): string | undefined {
  const r = spawnSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  if (r.status !== 0) return undefined;
  const dirty = spawnSync('git', ['-C', root, 'status', '--porcelain', '--', 'src', 'tools'], { encoding: 'utf8' });
  return `${r.stdout.trim()}${dirty.status === 0 && dirty.stdout.trim() ? '+changes' : ''}`;
}

async function startWorker(deps: Deps, taskQueue: string, eager = true, tree?: string): Promise<Child> {
  // The child inherits this process's environment, ONCEFLOW_MAX_CONCURRENT_ACTIVITIES included.
  const child = new Child(
    'worker.ts',
    {
      ONCEFLOW_TASK_QUEUE: taskQueue,
      ONCEFLOW_WORKFLOW_BUNDLE: tree ? bundleOf(tree) : deps.bundle,
      ONCEFLOW_BENCH_EAGER: eager ? '1' : '0',
    },
    tree,
  );
  await child.ready();
  return child;
}

async function verify(deps: Deps, spec: PipelineSpec): Promise<{ ok: boolean; failed: string[] }> {
  const r = await verifyPipeline(
    { cluster: deps.cluster, admin: deps.admin, pool: deps.pool, transforms: compareTransforms() },
    spec,
  );
  return { ok: r.ok, failed: r.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`) };
}

/** The workflows that run a pipeline's epochs: one per source partition, or one per partition group (spec.parallelism). */
const runnerIds = (spec: PipelineSpec, partitions: number): string[] =>
  spec.parallelism
    ? Array.from({ length: Math.min(spec.parallelism, partitions) }, (_, g) => groupWorkflowId(spec.name, g))
    : Array.from({ length: partitions }, (_, p) => partitionWorkflowId(spec.name, p));

/**
 * Workflow and activity tasks per committed epoch, from every run of the pipeline's partition
 * workflows; undefined if a history could not be read. Grouped (spec.parallelism): from the
 * group workflows, per committed *group* epoch, counted in their histories (`epochs`, the
 * members' epochs, is then not used).
 */
async function historyCost(
  deps: Deps,
  spec: PipelineSpec,
  partitions: number,
  epochs: number,
): Promise<TemporalCost | undefined> {
  try {
    const runs: HistoryEventLike[][] = [];
    for (const wid of runnerIds(spec, partitions)) {
      let runId: string | undefined;
      for (let k = 0; k < 10_000; k++) {
        const h = await deps.client.workflow.getHandle(wid, runId).fetchHistory();
        runs.push((h.events ?? []) as HistoryEventLike[]);
        const previous = h.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId;
        if (!previous) break;
        runId = previous;
      }
    }
    return temporalCost(runs, spec.parallelism ? committedEpochs(runs, COMMIT_ACTIVITIES) : epochs);
  } catch (e) {
    deps.log(`Temporal histories of ${spec.name} not read: ${e instanceof Error ? e.message : String(e)}`);
    return undefined;
  }
}

interface COutcome {
  run: EngineRun;
  split: EpochSplit;
  verified: boolean;
  failedChecks: string[];
  commitStartWaitMs: Percentiles & { mean: number };
  temporal?: TemporalCost;
}

async function runOnceflow(
  deps: Deps,
  spec: PipelineSpec,
  n: number,
  partitions: number,
  eager = true,
  tree?: string,
): Promise<COutcome> {
  const child = await startWorker(deps, `${spec.name}-tq`, eager, tree);
  const locks0 = await probe(deps.pool, true);
  child.send({ type: 'mark' });
  const startedAt = Date.now();
  const handle = await startPipeline(deps.client, spec, `${spec.name}-tq`);
  await controlPipeline(deps.client, spec.name, 'drain');
  const results = await handle.result();
  const doneAt = Date.now();
  const locks1 = await probe(deps.pool);
  const u = await child.stop();
  // The Temporal server's share is read once the run's deferred timer tasks have fired (deps.tailMs, TEMPORAL_TAIL_MS unless the options shorten it).
  await sleep(deps.tailMs);
  const temporalAfterTail = serviceCpu().temporal;
  const events = child.events as ObservedEvent[];
  const records = results.reduce((a, r) => a + r.state.records, 0);
  if (records !== n) throw new Error(`onceflow committed ${records} records, expected ${n}`);
  const { firstAt, lastAt } = activeSpan(events);
  const v = await verify(deps, spec);
  const epochs = results.reduce((a, r) => a + r.state.committedEpochs, 0);
  const temporal = await historyCost(deps, spec, partitions, epochs);
  return {
    run: {
      ...engineRun(records, firstAt, lastAt, startedAt, doneAt, u, [
        locks0,
        { ...locks1, cpu: { ...locks1.cpu, temporal: temporalAfterTail } },
      ]),
      temporalTailCpuMs: temporalAfterTail - locks1.cpu.temporal,
    },
    split: epochSplit(events),
    verified: v.ok,
    failedChecks: v.failed,
    commitStartWaitMs: commitStartWait(events),
    ...(temporal ? { temporal } : {}),
  };
}

/** Ends a pipeline that would not stop: its workflows terminated, its worker killed, its prepared XA branches rolled back (so cleanup can drop its tables). */
async function abandonPipeline(
  deps: Deps,
  spec: PipelineSpec,
  partitions: number,
  engine: Child | Workers,
): Promise<void> {
  await deps.client.workflow
    .getHandle(pipelineWorkflowId(spec.name))
    .terminate('bench: did not stop in time')
    .catch(() => undefined);
  for (const wid of runnerIds(spec, partitions))
    await deps.client.workflow
      .getHandle(wid)
      .terminate('bench: did not stop in time')
      .catch(() => undefined);
  for (const child of engine instanceof Workers ? engine.all : [engine]) {
    if (child.proc.exitCode !== null) continue;
    child.proc.kill('SIGKILL');
    await Promise.race([new Promise((r) => child.proc.once('exit', r)), limit(10_000)]);
  }
  // Partitions' and groups' branches alike ('of:<pipeline>:<p>:…', 'of:<pipeline>:g<g>:…').
  for (const x of await recoverXids(deps.pool, pipelineGtridPrefix(spec.name)).catch(() => []))
    await rollbackXid(deps.pool, x).catch(() => undefined);
}

interface LatencyParams {
  engine: 'B' | 'C';
  name: string;
  rate: number;
  seconds: number;
  /** paced seconds before `seconds`, reported apart */
  warmupSeconds: number;
  partitions: number;
  /** C's epoch bounds (merged into the base) */
  epoch: Record<string, unknown>;
  /** C's spec.parallelism (absent: ungrouped) */
  parallelism?: number;
  /** C's worker processes on the pipeline's task queue (absent: 1) */
  workers?: number;
  /** the paced records' row keys (absent: the demo's) */
  keys?: KeySpace;
  recordBytes: number;
  /** C only: the checkout whose worker runs (absent: this one) */
  tree?: string;
}

/** How long a pipeline may take to end after drain or stop, before it is terminated. */
const END_LIMIT_MS = 120_000;

/** Waits until every partition (through its group's workflow when grouped) reconciled and polls its first epoch (at most `limitMs`). */
async function partitionsPolling(
  deps: Deps,
  spec: PipelineSpec,
  partitions: number,
  limitMs: number,
): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  const ready = new Set<number>();
  while (Date.now() < deadline) {
    await Promise.all(
      Array.from({ length: partitions }, async (_, p) => {
        if (ready.has(p)) return;
        const s = await partitionStatus(deps.client, spec, p).catch(() => undefined);
        if (s && s.phase !== 'reconciling') ready.add(p);
      }),
    );
    if (ready.size === partitions) return true;
    await sleep(250);
  }
  return false;
}

/**
 * Paced input for `warmupSeconds` + `seconds`, then a wait for every record to become visible of
 * at most max(60 s, 6 × the paced duration) after the feed ended: what was not seen by then is
 * the backlog, and the figures are of what was seen — those of records appended in the first
 * `warmupSeconds` apart from the measured ones. Never waits longer than its limits.
 */
async function runLatency(deps: Deps, p: LatencyParams, created: PipelineSpec[]): Promise<LatencyRun> {
  const { engine, name, rate, seconds, warmupSeconds, partitions: P } = p;
  const gauge = cpuGauge();
  const serviceRoundTrips = await serviceGauge(deps, name);
  const source = `${name}.in`;
  const spec = specFor(name, source, p.epoch, 'staged', engine === 'C' ? p.parallelism : undefined);
  created.push(spec);
  await createTopics(deps.admin, [source], P, true);
  await createTopics(deps.admin, [spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic], P);
  const total = Math.round(rate * (warmupSeconds + seconds));
  const values = benchValues(total, 7, p.recordBytes, p.keys);
  const limitMs = Math.max(60_000, 6 * (warmupSeconds + seconds) * 1000);
  let child: Child | Workers | undefined;
  let handle: Awaited<ReturnType<typeof startPipeline>> | undefined;
  let watcher: ReturnType<typeof watchOutputs> | undefined;
  let settled = false;
  try {
    if (engine === 'B') {
      child = new Child('baseline.ts', {});
      await child.ready();
      child.send({ type: 'mark' });
      child.send({
        type: 'start',
        args: { spec, groupId: `${spec.name}-group`, partitions: P } satisfies BaselineArgs,
      });
    } else {
      const n = p.workers ?? 1;
      child =
        n > 1
          ? new Workers(
              await Promise.all(Array.from({ length: n }, () => startWorker(deps, `${spec.name}-tq`, true, p.tree))),
            )
          : await startWorker(deps, `${spec.name}-tq`, true, p.tree);
      child.send({ type: 'mark' });
      handle = await startPipeline(deps.client, spec, `${spec.name}-tq`);
    }
    const running = child;
    watcher = watchOutputs(deps.cluster, spec.kafkaSink.topic, P);
    if (engine === 'C') {
      if (!(await partitionsPolling(deps, spec, P, 120_000)))
        deps.log(`latency ${name}: not every partition workflow was polling after 120 s; feeding anyway`);
      await sleep(1000);
    } else await sleep(3000); // group join / first fetch
    const producer = deps.kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
    await producer.connect();
    const t0 = Date.now();
    const cpuAtFeed = cpuNow();
    let sent = 0;
    while (sent < total) {
      const due = Math.min(total, Math.floor(((Date.now() - t0) / 1000) * rate));
      if (due > sent) {
        const slice = values.slice(sent, due);
        await producer.send({
          topic: source,
          acks: -1,
          messages: slice.map((v, k) => ({ key: v.key, value: v.value, partition: (sent + k) % P })),
        });
        sent = due;
      }
      await sleep(5);
    }
    await producer.disconnect();
    const fedAt = Date.now();
    const feedCpu = cpuBetween(cpuAtFeed, cpuNow());
    const w = watcher;
    while (w.visible.size < total && Date.now() - fedAt < limitMs) {
      running.check();
      await sleep(50);
    }
    await w.stop();
    const seen = w.visible.size;
    const timedOut = seen < total;
    const drainMs = timedOut
      ? Date.now() - fedAt
      : Math.max(0, [...w.visible.values()].reduce((a, b) => Math.max(a, b), 0) - fedAt);
    let verified: boolean | undefined;
    let failedChecks: string[] | undefined;
    let ended: LatencyRun['ended'];
    let epochs = 0;
    if (handle) {
      // All seen: drain (the source is at its end). Not all: stop at the next epoch boundary.
      await controlPipeline(deps.client, spec.name, timedOut ? 'stop' : 'drain');
      const results = await Promise.race([handle.result(), limit(END_LIMIT_MS)]);
      if (results) {
        ended = timedOut ? 'stopped' : 'drained';
        epochs = results.reduce((a, r) => a + r.state.committedEpochs, 0);
      } else {
        ended = 'terminated';
        deps.log(
          `latency ${name}: the pipeline did not end within ${END_LIMIT_MS / 1000} s after ${timedOut ? 'stop' : 'drain'}; terminated`,
        );
        await abandonPipeline(deps, spec, P, running);
      }
    }
    const u = ended === 'terminated' ? undefined : await running.stop();
    settled = true;
    if (engine === 'C') {
      // The next run starts on a quiet Temporal server (deps.tailMs, as after a throughput run).
      await sleep(deps.tailMs);
      if (ended === 'terminated') {
        verified = false;
        failedChecks = [`the pipeline did not end within ${END_LIMIT_MS / 1000} s and was terminated; not verified`];
      } else {
        // What was committed, exactly once (a stopped pipeline committed a prefix of the input).
        const v = await verify(deps, spec);
        verified = v.ok;
        failedChecks = v.failed;
      }
    }
    const appended = await sourceAppendTimes(deps.cluster, source, P);
    const lat: number[] = [];
    const warm: number[] = [];
    const byWindow: number[][] = [];
    for (const [src, at] of w.visible) {
      const ts = appended.get(src);
      if (ts === undefined) continue;
      (ts - t0 < warmupSeconds * 1000 ? warm : lat).push(at - ts);
      const k = Math.max(0, Math.floor((ts - t0) / (LATENCY_WINDOW_S * 1000)));
      (byWindow[k] ??= []).push(at - ts);
    }
    const events = running.events as ObservedEvent[];
    const split = engine === 'C' ? epochSplit(events) : undefined;
    const temporal = engine === 'C' && ended !== 'terminated' ? await historyCost(deps, spec, P, epochs) : undefined;
    return {
      engine,
      partitions: P,
      rate,
      seconds,
      records: total,
      seen,
      latencyMs: percentiles(lat),
      ...(warmupSeconds > 0 ? { warmupSeconds, warmupLatencyMs: percentiles(warm) } : {}),
      latencyByWindow: [...byWindow.entries()]
        .filter(([, v]) => v?.length)
        .map(([k, v]) => ({ fromSec: k * LATENCY_WINDOW_S, ...percentiles(v) })),
      limitMs,
      timedOut,
      backlog: total - seen,
      drainMs,
      ...(engine === 'C'
        ? { epoch: { ...spec.epoch }, ...(spec.parallelism ? { parallelism: spec.parallelism } : {}) }
        : {}),
      ...(p.tree ? { tree: p.tree, ...optionalCode(commitOf(p.tree)) } : {}),
      ...(running instanceof Workers ? { workers: running.all.length, placement: running.placement() } : {}),
      ...(split ? { epochIntervalMs: split.cycleMs, split, commitStartWaitMs: commitStartWait(events) } : {}),
      ...(temporal ? { temporal } : {}),
      ...gauge,
      serviceGauge: serviceRoundTrips,
      feedCpu,
      ...(verified !== undefined ? { verified, failedChecks: failedChecks ?? [] } : {}),
      ...(ended && ended !== 'drained' ? { ended } : {}),
      cpuCores: u ? u.cpuMs / u.wallMs : NaN,
      peakRssMb: u ? u.peakRssMb : NaN,
    };
  } finally {
    await watcher?.stop();
    if (!settled && child) {
      // Failed midway: nothing of this run may stay running (or hold XA branches) behind the bench's back.
      if (handle) await abandonPipeline(deps, spec, P, child);
      else if (child instanceof Child && child.proc.exitCode === null) child.proc.kill('SIGKILL');
    }
  }
}
