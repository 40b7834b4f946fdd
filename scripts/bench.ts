/**
 * npm run bench — brings up an isolated service stack (its own ports and data directory, so
 * other test runs do not share the broker), measures A/B/C (see tools/bench/run.ts), writes
 * bench/results/<date>[-<label>].json (never over an earlier one) and the generated part of docs/performance.md + the chart.
 *
 * Knobs (environment; defaults in parentheses, lists comma-separated; tools/bench/run.ts defaultOptions):
 *   Main data and C's throughput runs
 *     BENCH_RECORDS (500000)             records of ~200 B on the main source topic
 *     BENCH_PARTITIONS (4)               its source partitions
 *     BENCH_EPOCHS (1000,5000,20000)     C runs at these epoch.maxRecords (staged, eager dispatch); empty: none
 *     BENCH_DIRECT_EPOCHS (1000)         C runs with mysqlSink.mode direct at these sizes; empty: none
 *     BENCH_NO_EAGER_EPOCHS (1000)       C runs by a worker that takes no activity task eagerly; empty: none
 *     BENCH_C_VARIANTS                   JSON array of more C runs: {label, epoch, mysqlMode?, eager?, parallelism?, specPadBytes?, tree?};
 *                                        epoch is merged into the spec's epoch (unknown fields refused by the spec),
 *                                        parallelism = spec.parallelism, the number of partition groups (integer ≥ 1),
 *                                        specPadBytes = filler bytes added to the spec (a probe of what its size costs),
 *                                        tree = another checkout whose worker runs it (e.g. a git worktree of the
 *                                        commit before a change: before and after in one run)
 *     BENCH_DISTINCT (1)                 the B, C and latency runs again on data with (nearly) one row key per record
 *                                        (slot_time a second of 2019), MariaDB CPU per 1,000 records beside B's; 0: not
 *     BENCH_PERF_TRANSACTION_MS (1000)   transaction duration of A's transactional ProducerPerformance run
 *     BENCH_BRACKET_B (1)                B again after every C run; each C/B is against the mean of the B runs just
 *                                        before and after it (0: one B at the start for every ratio)
 *   Latency settings (C's latency run, one C throughput run at exactly these settings, the scale phase)
 *     BENCH_LATENCY_RATE (13000)         paced input, records/s; 0 = half the slower of B and the best C
 *     BENCH_LATENCY_SECONDS (20)         seconds of paced input measured
 *     BENCH_LATENCY_WARMUP_SECONDS (5)   seconds of paced input before them, in every latency run (scale phase
 *                                        too), B and C alike; their records' latencies are reported apart
 *     BENCH_LATENCY_EPOCH ({"maxRecords":50000})  JSON object merged into C's epoch
 *     BENCH_LATENCY_PARALLELISM (1; empty = ungrouped)  spec.parallelism of C's latency run, of the throughput
 *                                        run at the latency settings and of the grouped scale series' latency runs
 *     BENCH_LATENCY_WORKERS (1)         C's worker processes in the paced latency run (one task queue; the
 *                                        groups or partitions each one prepared are in the results)
 *     BENCH_LATENCY_TREES                other checkouts whose workers run C's paced latency once more each, after
 *                                        this checkout's (before and after a change to the epoch cycle in one run)
 *   Scale phase (the same records over more source partitions; C at the latency settings)
 *     BENCH_SCALE_PARTITIONS (4,16,64,256) partition counts, the first is the reference of the ratios; empty: no scale phase
 *     BENCH_SCALE_RECORDS (400000)       records at every count
 *     BENCH_SCALE_LATENCY_SECONDS (10)   seconds of paced input measured per latency run (after the warm-up)
 *     BENCH_SCALE_PARALLELISM (2)        partition groups of the grouped series (C at every count once more, with
 *                                        spec.parallelism, verified, with its own latency run); empty: no grouped series
 *     BENCH_SCALE_UNGROUPED (1)          0: no ungrouped C series (one workflow per partition), e.g. for a 256-partition run
 *     BENCH_SCALE_UNGROUPED_MAX (64)     the ungrouped C series only up to this partition count (256: grouped only); empty: every count
 *     BENCH_SCALE_BRACKET (1)            the first count's B and C throughput runs again after every other count (4, 16, 4,
 *                                        64, 4), each count's ratios against the mean of those just before and after it; 0: each count once
 *   Output and stack
 *     BENCH_LABEL                        results file bench/results/<date>-<label>.json (-2, -3, … if taken)
 *     BENCH_BEFORE                       an earlier results file, shown as "before" columns
 *     BENCH_TARGET_RUNS                  earlier results files, oldest first: docs/performance.md opens with the targets
 *                                        of those runs and this one side by side, each judged by this run's targets
 *     BENCH_DOCS=0                       do not touch docs/performance.md and docs/performance.svg
 *     BENCH_FROM=<results file>          measure nothing: render docs/performance.md and .svg again from a saved run
 *     BENCH_SKIP_SERVICES=1              do not run scripts/services.sh up (the stack is already up)
 *     BENCH_CPU_PROF=<dir>               every engine process (B and C) writes a V8 CPU profile there as it exits
 *     BENCH_HEAP_SAMPLE=<dir>            every engine process writes there a sampled heap profile of the objects that
 *                                        outlived its young generation, by allocation site (tools/bench/heap-sample.cjs)
 *     BENCH_NODE_ARGS                    more node flags for every engine process, space-separated (e.g. --trace-gc)
 *     BENCH_SDK_METRICS=<dir>            every C worker writes there the Temporal SDK's own metrics as it stops
 *                                        (worker-<pid>.prom: workflow-task and request latencies as the worker sees them)
 *     ONCEFLOW_RUN_DIR, ONCEFLOW_PORT_BASE  the stack (default ~/.cache/onceflow/bench-run, 28000; the secured stack has 27000)
 *     ONCEFLOW_MAX_CONCURRENT_ACTIVITIES the C workers' activity slots (inherited; recorded in the results)
 *     ONCEFLOW_WORKFLOW_BUNDLE           a prebuilt workflow bundle (else one is built per run)
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, relative } from 'node:path';
import { Runtime, DefaultLogger } from '@temporalio/worker';
import { markdown, spliceGenerated, svgChart, TARGETS_MARKERS, targetsBlock } from '../tools/bench/report';
import { defaultOptions, runBench, type BenchResult } from '../tools/bench/run';

const ROOT = join(__dirname, '..');

async function main() {
  const { result, file } = process.env.BENCH_FROM
    ? { result: readResult(process.env.BENCH_FROM), file: process.env.BENCH_FROM }
    : await measure();
  const before = process.env.BENCH_BEFORE ? readResult(process.env.BENCH_BEFORE) : undefined;
  const block = markdown(result, 'performance.svg', before);
  const earlier = (process.env.BENCH_TARGET_RUNS ?? '')
    .split(',')
    .map((f) => f.trim())
    .filter(Boolean)
    .map((f) => ({ file: f, result: readResult(f) }));
  const targets = earlier.length ? targetsBlock([...earlier, { file, result }]) : undefined;
  if (process.env.BENCH_DOCS !== '0') {
    const page = join(ROOT, 'docs', 'performance.md');
    const text = existsSync(page) ? readFileSync(page, 'utf8') : '# Performance\n';
    const withTargets = targets ? spliceGenerated(text, targets, TARGETS_MARKERS) : text;
    writeFileSync(page, spliceGenerated(withTargets, block));
    writeFileSync(join(ROOT, 'docs', 'performance.svg'), svgChart(result, before));
    console.log('docs/performance.md and docs/performance.svg updated');
  }
  if (targets) console.log(targets);
  console.log(block);
}

function readResult(file: string): BenchResult {
  return JSON.parse(readFileSync(file, 'utf8')) as BenchResult;
}

/** Runs the bench; the result and the results file it was written to (relative to the checkout). */
async function measure(): Promise<{ result: BenchResult; file: string }> {
  process.env.ONCEFLOW_RUN_DIR ??= join(homedir(), '.cache', 'onceflow', 'bench-run');
  process.env.ONCEFLOW_PORT_BASE ??= '28000';
  if (process.env.BENCH_SKIP_SERVICES !== '1') {
    const r = spawnSync('bash', [join(ROOT, 'scripts', 'services.sh'), 'up'], { stdio: 'inherit', env: process.env });
    if (r.status !== 0) throw new Error('scripts/services.sh up failed');
  }
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const opts = defaultOptions();
  const result = await runBench(opts);
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = writeNew(
    dir,
    `${result.date.slice(0, 10)}${opts.label ? `-${opts.label}` : ''}`,
    JSON.stringify(result, null, 2) + '\n',
  );
  console.log(`results written to ${file}`);
  return { result, file: relative(ROOT, file) };
}

/** Writes <stem>.json, or <stem>-2.json, -3, … if taken: a second run with one label on one day keeps the first. */
function writeNew(dir: string, stem: string, text: string): string {
  for (let n = 1; ; n++) {
    const file = join(dir, `${stem}${n > 1 ? `-${n}` : ''}.json`);
    try {
      writeFileSync(file, text, { flag: 'wx' });
      return file;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
}

main().catch((e) => {
  console.error(`bench failed: ${e instanceof Error ? e.stack : String(e)}`);
  process.exit(1);
});
