/**
 * `npm run bench`: one run that measures, on the same generated data,
 *   A  the broker's limit with Kafka's own ProducerPerformance (plain and transactional),
 *   B  the same pipeline at-least-once (kafkajs consume → produce, batched MySQL upserts),
 *   C  onceflow exactly-once at a few epoch sizes (each run verified exactly-once),
 * then end-to-end latency (source append time → visible to a read_committed reader) of B and C
 * at a paced input rate. The engines under test run in child processes (CPU, peak memory).
 */
import { createTopicsReady } from '../../src/kafka/topics';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { cpus, homedir, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Admin } from 'kafkajs';
import type { ObservedEvent } from '../../src/activities';
import { controlPipeline, startPipeline } from '../../src/client';
import { openConnections, type Connections } from '../../src/connections';
import { loadSettings, toolPaths } from '../../src/config';
import type { Pool } from 'mysql2/promise';
import { fetchPartition, ISOLATION, type KafkaCluster } from '../../src/kafka/internals';
import { dropPipelineTables } from '../../src/mysql/stage';
import { compareSpec, makeEvents, produceRecords } from '../../examples/flink-compare/scenario';
import type { PipelineSpec } from '../../src/spec';
import { readAll, verifyPipeline } from '../../src/verify';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import { activeSpan, epochSplit, percentiles, type EpochSplit, type Percentiles } from './analyze';
import type { BaselineArgs, BaselineBatch } from './baseline';
import type { FromChild, ToChild, Usage } from './ipc';

const ROOT = join(__dirname, '..', '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface BenchOptions {
  records: number;
  partitions: number;
  recordBytes: number;
  epochSizes: number[];
  /** Epoch sizes also run with mysqlSink.mode 'direct' (rows written inside the XA branch), side by side with the staged default. */
  directEpochSizes: number[];
  /** Epoch sizes also run by a worker that takes no activity task eagerly (maxEagerActivityReservationsPerWorkflowTask 0). */
  noEagerEpochSizes: number[];
  /** Paced input rate of the latency phase (records/s); 0 = half the slower of B and the best C. */
  latencyRate: number;
  latencySeconds: number;
  /** transaction duration of the transactional ProducerPerformance run */
  perfTransactionMs: number;
  label?: string;
  log?: (line: string) => void;
}

export interface PerfResult {
  recordsPerSec: number;
  mbPerSec: number;
  avgLatencyMs: number;
  p99LatencyMs: number;
  command: string;
}

export interface EngineRun {
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
  /** CPU ms per 1,000 records spent by the services during the run (the engine's own is cpuMsPer1kRecords) */
  servicesCpuMsPer1k: ServiceCpu;
  /** InnoDB row lock waits during the run (global status delta): contention on the sink table's keys */
  rowLockWaits: number;
  rowLockWaitMs: number;
}

export interface CRun extends EngineRun {
  epochMaxRecords: number;
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
}

export interface LatencyRun {
  engine: 'B' | 'C';
  rate: number;
  seconds: number;
  records: number;
  seen: number;
  latencyMs: Percentiles;
  /** C only: mean prepare-start → next prepare-start per partition */
  epochIntervalMs?: number;
  split?: EpochSplit;
  verified?: boolean;
  cpuCores: number;
  peakRssMb: number;
}

export interface BenchResult {
  date: string;
  label?: string;
  command: string;
  machine: { cpus: number; model: string; node: string; loadBefore: number[]; loadAfter: number[] };
  options: Omit<BenchOptions, 'log'>;
  A: { plain: PerfResult; transactional: PerfResult };
  B: EngineRun;
  C: CRun[];
  latency: LatencyRun[];
}

export function defaultOptions(env: NodeJS.ProcessEnv = process.env): BenchOptions {
  const num = (k: string, d: number) => (env[k] ? Number(env[k]) : d);
  return {
    records: num('BENCH_RECORDS', 500_000),
    partitions: num('BENCH_PARTITIONS', 4),
    recordBytes: 200,
    epochSizes: (env.BENCH_EPOCHS ?? '1000,5000,20000').split(',').map(Number),
    directEpochSizes: (env.BENCH_DIRECT_EPOCHS ?? '1000').split(',').filter(Boolean).map(Number),
    noEagerEpochSizes: (env.BENCH_NO_EAGER_EPOCHS ?? '1000').split(',').filter(Boolean).map(Number),
    latencyRate: num('BENCH_LATENCY_RATE', 0),
    latencySeconds: num('BENCH_LATENCY_SECONDS', 20),
    perfTransactionMs: num('BENCH_PERF_TRANSACTION_MS', 1000),
    ...(env.BENCH_LABEL ? { label: env.BENCH_LABEL } : {}),
  };
}

/** Values of about `bytes` bytes: the demo's compare events plus padding. */
function benchValues(n: number, seed: number, bytes: number): { key: string; value: string }[] {
  const { values } = makeEvents(n, seed);
  return values.map((v) => {
    if (typeof v === 'string') throw new Error('no poison in benchmark data');
    const base = JSON.stringify({ ...v, pad: '' });
    return { key: v.id, value: JSON.stringify({ ...v, pad: 'x'.repeat(Math.max(0, bytes - base.length)) }) };
  });
}

type Deps = Connections & { bundle: string };

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
}

/** An engine under test in its own process. */
class Child {
  readonly proc: ChildProcess;
  readonly events: unknown[] = [];
  private readyP: Promise<void>;
  private usageP: Promise<Usage>;
  private failure: Error | undefined;

  constructor(file: string, env: Record<string, string>) {
    this.proc = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'tools', 'bench', file)], {
      cwd: ROOT,
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
    const u = await Promise.race([this.usageP, sleep(60_000).then(() => null)]);
    if (!u) {
      this.proc.kill('SIGKILL');
      throw new Error('engine process did not stop within 60 s');
    }
    await new Promise((r) => (this.proc.exitCode !== null ? r(null) : this.proc.once('exit', r)));
    return u;
  }
}

function runPerf(libs: string, brokers: string, topic: string, n: number, bytes: number, txnMs?: number): PerfResult {
  const args = [
    '-Xmx512m',
    '-cp',
    `${libs}/*`,
    'org.apache.kafka.tools.ProducerPerformance',
    '--topic', topic,
    '--num-records', String(n),
    '--record-size', String(bytes),
    '--throughput', '-1',
    '--producer-props', `bootstrap.servers=${brokers}`, 'acks=all',
    ...(txnMs ? ['--transactional-id', `${topic}-txn`, '--transaction-duration-ms', String(txnMs)] : []),
  ];
  const r = spawnSync('java', args, { encoding: 'utf8', timeout: 600_000, maxBuffer: 64 << 20 });
  const out = `${r.stdout ?? ''}\n${r.stderr ?? ''}`;
  const m = /(\d+) records sent, ([\d.]+) records\/sec \(([\d.]+) MB\/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency(?:, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th)?/.exec(out);
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

/** CPU time (ms) used so far by the stack's servers, found by their command lines naming the run directory. */
function serviceCpu(): ServiceCpu {
  const runDir = process.env.ONCEFLOW_RUN_DIR || join(homedir(), '.cache', 'onceflow', 'run');
  const out: ServiceCpu = { temporal: 0, kafka: 0, mariadb: 0 };
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (!cmd.includes(`${runDir}/`)) continue;
      const kind: keyof ServiceCpu | undefined = cmd.includes('kafka.Kafka') ? 'kafka' : cmd.includes('mariadbd') ? 'mariadb' : cmd.includes('start-dev') ? 'temporal' : undefined;
      if (!kind) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out[kind] += ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, in clock ticks of 10 ms
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
}

async function probe(pool: Pool): Promise<Probe> {
  return { locks: await rowLocks(pool), cpu: serviceCpu() };
}

async function rowLocks(pool: Pool): Promise<LockStatus> {
  const [rows] = await pool.query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', 'Innodb_row_lock_time')");
  const get = (n: string) => Number((rows as { Variable_name: string; Value: string }[]).find((r) => r.Variable_name === n)?.Value ?? NaN);
  return { waits: get('Innodb_row_lock_waits'), ms: get('Innodb_row_lock_time') };
}

function engineRun(records: number, firstAt: number, lastAt: number, startedAt: number, doneAt: number, u: Usage, probes: [Probe, Probe]): EngineRun {
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
    servicesCpuMsPer1k: { temporal: per1k('temporal'), kafka: per1k('kafka'), mariadb: per1k('mariadb') },
    rowLockWaits: b.locks.waits - a.locks.waits,
    rowLockWaitMs: b.locks.ms - a.locks.ms,
  };
}

function specFor(name: string, source: string, epochMaxRecords: number, partitions: number, mode: 'staged' | 'direct' = 'staged'): PipelineSpec {
  void partitions;
  const spec = compareSpec({
    name,
    source: { topic: source },
    kafkaSink: { topic: `${name}.out` },
    epoch: { maxRecords: epochMaxRecords, maxBytes: 64 << 20, maxWaitMs: 1000 },
    transformOptions: { table: `t_${name.replace(/[^a-z0-9]/g, '_')}` },
  });
  return { ...spec, mysqlSink: { ...spec.mysqlSink, mode } };
}

/** Watches output partitions with read_committed and stamps when each source record's output became visible. */
function watchOutputs(cluster: KafkaCluster, topic: string, partitions: number) {
  const visible = new Map<string, number>();
  let stop = false;
  const loops = Array.from({ length: partitions }, async (_, p) => {
    let next = 0;
    while (!stop) {
      let r;
      try {
        r = await fetchPartition(cluster, { topic, partition: p, fromOffset: next, maxBytes: 4 << 20, maxWaitMs: 100, isolation: ISOLATION.READ_COMMITTED });
      } catch {
        // e.g. UNKNOWN_TOPIC_OR_PARTITION while a new topic's metadata propagates: poll again
        await sleep(50);
        continue;
      }
      const now = Date.now();
      for (const rec of r.records) {
        const src = (JSON.parse(rec.value?.toString('utf8') ?? '{}') as { src?: string }).src;
        if (src && !visible.has(src)) visible.set(src, now);
      }
      next = Math.max(next, r.nextOffset);
    }
  });
  return {
    visible,
    async stop() {
      stop = true;
      await Promise.all(loops);
    },
  };
}

async function sourceAppendTimes(cluster: KafkaCluster, topic: string, partitions: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (let p = 0; p < partitions; p++) {
    for (const r of await readAll(cluster, topic, p, ISOLATION.READ_COMMITTED)) out.set(`${p}:${r.offset}`, Number(r.timestamp));
  }
  return out;
}

async function waitFor(what: string, fn: () => boolean, timeoutMs: number, check: () => void = () => undefined): Promise<void> {
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
  if (!libs || !existsSync(libs)) throw new Error('the Kafka jars (ONCEFLOW_KAFKA_LIBS) were not found; run scripts/services.sh up first');
  let bundle = process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '';
  if (!bundle || !existsSync(bundle)) {
    bundle = join(mkdtempSync(join(tmpdir(), 'onceflow-bench-')), 'workflow-bundle.js');
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts', 'bundle-workflows.ts'), bundle], { cwd: ROOT, stdio: 'inherit' });
    if (r.status !== 0) throw new Error('bundling the workflows failed');
  }
  const connections = await openConnections(settings, 'onceflow-bench');
  const { kafka, admin } = connections;
  const deps: Deps = { ...connections, bundle };
  const id = `b${Date.now().toString(36)}`;
  const loadBefore = loadavg();
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

    log('B: at-least-once baseline');
    const bSpec = specFor(`${id}-b`, source, 0 || 5000, P);
    created.push(bSpec);
    const B = await runBaseline(deps, bSpec, N, P);
    log(`B: ${B.recordsPerSec.toFixed(0)} records/s`);

    const C: CRun[] = [];
    const cRuns = [
      ...opts.epochSizes.map((size) => ({ size, mode: 'staged' as const, eager: true })),
      ...opts.directEpochSizes.map((size) => ({ size, mode: 'direct' as const, eager: true })),
      ...opts.noEagerEpochSizes.map((size) => ({ size, mode: 'staged' as const, eager: false })),
    ];
    for (const { size, mode, eager } of cRuns) {
      const spec = specFor(`${id}-c${mode === 'direct' ? 'd' : ''}${eager ? '' : 'n'}${size}`, source, size, P, mode);
      created.push(spec);
      log(`C: onceflow exactly-once, epoch.maxRecords ${size}, MySQL ${mode}${eager ? '' : ', no eager activities'}`);
      const c = await runOnceflow(deps, spec, N, eager);
      const run: CRun = {
        ...c.run,
        epochMaxRecords: size,
        mysqlMode: mode,
        eagerActivities: eager,
        vsB: c.run.recordsPerSec / B.recordsPerSec,
        vsAPlain: c.run.recordsPerSec / plain.recordsPerSec,
        vsATransactional: c.run.recordsPerSec / transactional.recordsPerSec,
        split: c.split,
        verified: c.verified,
        failedChecks: c.failedChecks,
      };
      C.push(run);
      log(`C ${size} ${mode}${eager ? '' : ' no-eager'}: ${run.recordsPerSec.toFixed(0)} records/s (C/B ${run.vsB.toFixed(2)}), verified: ${run.verified ? 'exactly once' : `FAILED ${run.failedChecks.join('; ')}`}`);
    }

    const bestC = Math.max(...C.map((c) => c.recordsPerSec));
    const rate = opts.latencyRate > 0 ? opts.latencyRate : Math.max(100, Math.round((0.5 * Math.min(bestC, B.recordsPerSec)) / 100) * 100);
    const latency: LatencyRun[] = [];
    for (const engine of ['B', 'C'] as const) {
      log(`latency: ${engine} at ${rate} records/s for ${opts.latencySeconds} s`);
      const l = await runLatency(deps, engine, `${id}-l${engine.toLowerCase()}`, rate, opts, created);
      latency.push(l);
      log(`latency ${engine}: p50 ${l.latencyMs.p50} ms, p99 ${l.latencyMs.p99} ms (${l.seen}/${l.records} seen)`);
    }
    return {
      date: new Date().toISOString(),
      ...(opts.label ? { label: opts.label } : {}),
      command: 'npm run bench',
      machine: { cpus: cpus().length, model: cpus()[0]?.model ?? '?', node: process.version, loadBefore, loadAfter: loadavg() },
      options: { records: opts.records, partitions: opts.partitions, recordBytes: opts.recordBytes, epochSizes: opts.epochSizes, directEpochSizes: opts.directEpochSizes, noEagerEpochSizes: opts.noEagerEpochSizes, latencyRate: rate, latencySeconds: opts.latencySeconds, perfTransactionMs: opts.perfTransactionMs, ...(opts.label ? { label: opts.label } : {}) },
      A: { plain, transactional },
      B,
      C,
      latency,
    };
  } finally {
    await cleanup(deps, id, created).catch((e) => log(`cleanup: ${String(e)}`));
    await connections.close();
  }
}

async function cleanup(deps: Deps, id: string, specs: PipelineSpec[]): Promise<void> {
  const topics = (await deps.admin.listTopics()).filter((t) => t.startsWith(`${id}.`) || t.startsWith(`${id}-`) || t.startsWith(`onceflow.progress.${id}`));
  if (topics.length) await deps.admin.deleteTopics({ topics, timeout: 60_000 }).catch(() => undefined);
  for (const s of specs) {
    await dropPipelineTables(deps.pool, s);
  }
}

async function runBaseline(deps: Deps, spec: PipelineSpec, n: number, partitions: number): Promise<EngineRun> {
  await createTopics(deps.admin, [spec.kafkaSink.topic, spec.deadLetterTopic], partitions);
  const child = new Child('baseline.ts', {});
  await child.ready();
  const locks0 = await probe(deps.pool);
  child.send({ type: 'mark' });
  const startedAt = Date.now();
  child.send({ type: 'start', args: { spec, groupId: `${spec.name}-group`, partitions } satisfies BaselineArgs });
  const batches = () => child.events as BaselineBatch[];
  const count = () => batches().reduce((a, b) => a + b.records, 0);
  await waitFor(`baseline to process ${n} records`, () => count() >= n, 900_000, () => child.check());
  const doneAt = Date.now();
  const locks1 = await probe(deps.pool);
  const u = await child.stop();
  const firstAt = Math.min(...batches().map((b) => b.readAt));
  const lastAt = Math.max(...batches().map((b) => b.doneAt));
  return engineRun(count(), firstAt, lastAt, startedAt, doneAt, u, [locks0, locks1]);
}

async function startWorker(deps: Deps, taskQueue: string, eager = true): Promise<Child> {
  const child = new Child('worker.ts', { ONCEFLOW_TASK_QUEUE: taskQueue, ONCEFLOW_WORKFLOW_BUNDLE: deps.bundle, ONCEFLOW_BENCH_EAGER: eager ? '1' : '0' });
  await child.ready();
  return child;
}

async function verify(deps: Deps, spec: PipelineSpec): Promise<{ ok: boolean; failed: string[] }> {
  const r = await verifyPipeline({ cluster: deps.cluster, admin: deps.admin, pool: deps.pool, transforms: compareTransforms() }, spec);
  return { ok: r.ok, failed: r.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`) };
}

async function runOnceflow(deps: Deps, spec: PipelineSpec, n: number, eager = true): Promise<{ run: EngineRun; split: EpochSplit; verified: boolean; failedChecks: string[] }> {
  const child = await startWorker(deps, `${spec.name}-tq`, eager);
  const locks0 = await probe(deps.pool);
  child.send({ type: 'mark' });
  const startedAt = Date.now();
  const handle = await startPipeline(deps.client, spec, `${spec.name}-tq`);
  await controlPipeline(deps.client, spec.name, 'drain');
  const results = await handle.result();
  const doneAt = Date.now();
  const locks1 = await probe(deps.pool);
  const u = await child.stop();
  const events = child.events as ObservedEvent[];
  const records = results.reduce((a, r) => a + r.state.records, 0);
  if (records !== n) throw new Error(`onceflow committed ${records} records, expected ${n}`);
  const { firstAt, lastAt } = activeSpan(events);
  const v = await verify(deps, spec);
  return { run: engineRun(records, firstAt, lastAt, startedAt, doneAt, u, [locks0, locks1]), split: epochSplit(events), verified: v.ok, failedChecks: v.failed };
}

async function runLatency(deps: Deps, engine: 'B' | 'C', name: string, rate: number, opts: BenchOptions, created: PipelineSpec[]): Promise<LatencyRun> {
  const P = opts.partitions;
  const source = `${name}.in`;
  const spec = specFor(name, source, 5000, P);
  created.push(spec);
  await createTopics(deps.admin, [source], P, true);
  await createTopics(deps.admin, [spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic], P);
  const total = Math.round(rate * opts.latencySeconds);
  const values = benchValues(total, 7, opts.recordBytes);
  let child: Child;
  let handle: Awaited<ReturnType<typeof startPipeline>> | undefined;
  if (engine === 'B') {
    child = new Child('baseline.ts', {});
    await child.ready();
    child.send({ type: 'mark' });
    child.send({ type: 'start', args: { spec, groupId: `${spec.name}-group`, partitions: P } satisfies BaselineArgs });
  } else {
    child = await startWorker(deps, `${spec.name}-tq`);
    child.send({ type: 'mark' });
    handle = await startPipeline(deps.client, spec, `${spec.name}-tq`);
  }
  const watcher = watchOutputs(deps.cluster, spec.kafkaSink.topic, P);
  await sleep(3000); // group join / first prepare polling
  const producer = deps.kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  await producer.connect();
  const t0 = Date.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((Date.now() - t0) / 1000) * rate));
    if (due > sent) {
      const slice = values.slice(sent, due);
      await producer.send({ topic: source, acks: -1, messages: slice.map((v, k) => ({ key: v.key, value: v.value, partition: (sent + k) % P })) });
      sent = due;
    }
    await sleep(5);
  }
  await producer.disconnect();
  await waitFor(`${engine} outputs to become visible`, () => watcher.visible.size >= total, 180_000, () => child.check());
  await watcher.stop();
  let verified: boolean | undefined;
  if (handle) {
    await controlPipeline(deps.client, spec.name, 'drain');
    await handle.result();
  }
  const u = await child.stop();
  if (engine === 'C') verified = (await verify(deps, spec)).ok;
  const appended = await sourceAppendTimes(deps.cluster, source, P);
  const lat: number[] = [];
  for (const [src, at] of watcher.visible) {
    const ts = appended.get(src);
    if (ts !== undefined) lat.push(at - ts);
  }
  const events = child.events as ObservedEvent[];
  const split = engine === 'C' ? epochSplit(events) : undefined;
  return {
    engine,
    rate,
    seconds: opts.latencySeconds,
    records: total,
    seen: watcher.visible.size,
    latencyMs: percentiles(lat),
    ...(split ? { epochIntervalMs: split.cycleMs, split } : {}),
    ...(verified !== undefined ? { verified } : {}),
    cpuCores: u.cpuMs / u.wallMs,
    peakRssMb: u.peakRssMb,
  };
}
