/**
 * npm run bench — brings up an isolated service stack (its own ports and data directory, so
 * other test runs do not share the broker), measures A/B/C (see tools/bench/run.ts), writes
 * bench/results/<date>[-<label>].json and the generated part of docs/performance.md + the chart.
 *
 * Environment: BENCH_RECORDS (500000), BENCH_PARTITIONS (4), BENCH_EPOCHS (1000,5000,20000),
 * BENCH_LATENCY_RATE (0 = auto), BENCH_LATENCY_SECONDS (20), BENCH_LABEL, BENCH_BEFORE (a
 * results file to show as "before"), BENCH_DOCS=0 (do not touch docs/), BENCH_SKIP_SERVICES=1,
 * ONCEFLOW_RUN_DIR / ONCEFLOW_PORT_BASE (default ~/.cache/onceflow/bench-run, 28000; the secured stack has 27000).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Runtime, DefaultLogger } from '@temporalio/worker';
import { markdown, spliceGenerated, svgChart } from '../tools/bench/report';
import { defaultOptions, runBench, type BenchResult } from '../tools/bench/run';

const ROOT = join(__dirname, '..');

async function main() {
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
  const file = join(dir, `${result.date.slice(0, 10)}${opts.label ? `-${opts.label}` : ''}.json`);
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n');
  console.log(`results written to ${file}`);
  const before = process.env.BENCH_BEFORE ? (JSON.parse(readFileSync(process.env.BENCH_BEFORE, 'utf8')) as BenchResult) : undefined;
  const block = markdown(result, 'performance.svg', before);
  if (process.env.BENCH_DOCS !== '0') {
    const page = join(ROOT, 'docs', 'performance.md');
    const text = existsSync(page) ? readFileSync(page, 'utf8') : '# Performance\n';
    writeFileSync(page, spliceGenerated(text, block));
    writeFileSync(join(ROOT, 'docs', 'performance.svg'), svgChart(result, before));
    console.log('docs/performance.md and docs/performance.svg updated');
  }
  console.log(block);
}

main().catch((e) => {
  console.error(`bench failed: ${e instanceof Error ? e.stack : String(e)}`);
  process.exit(1);
});
