/**
 * `npm run chaos [-- --seed N] [--short] [--parallelism N] [--out FILE] [--keep-services]`
 *   --parallelism N: the campaign's pipeline runs in N partition groups (spec.parallelism)
 * `npm run chaos -- --cluster [--seed N] [--controllers 3]`: the cluster campaign (3 KRaft nodes, a
 *   node killed at every protocol step: transaction coordinator, partition leader, active
 *   controller), its own section of docs/reliability-runs.md; --controllers 3: the nodes are brokers
 *   and three more nodes are the KRaft controllers (Kafka's production layout)
 * `npm run soak  [-- --seed N] [--short] [--out FILE] [--keep-services]`  (this file with --soak)
 * `... --from RESULT.json`: no run; the report rendered again from a saved result (a soak's
 * bounded-state checks recomputed from its samples)
 * Runs the fault campaign (tools/chaos/) — or the soak, the same campaign over an hour with
 * faults minutes apart and its state sampled — on its own isolated service stack, prints the
 * verdict, writes its part of docs/reliability-runs.md (full runs) and stops the stack. Exit code 1
 * on any failed check; a failing run prints its seed and the command that replays it.
 */
import { execSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { boundedStateChecks } from '../tools/chaos/bounds';
import { runCampaign, type CampaignResult } from '../tools/chaos/campaign';
import { kindCoverageCheck } from '../tools/chaos/verdict';
import { presetOptions, withParallelism } from '../tools/chaos/presets';
import { renderReport, renderSoak, soakVerdict, spliceReport } from '../tools/chaos/report';
import { services } from '../tools/chaos/stack';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main() {
  const short = process.argv.includes('--short');
  const soak = process.argv.includes('--soak');
  const clusterRun = process.argv.includes('--cluster');
  const seedArg = arg('--seed');
  const seed = seedArg !== undefined ? Number(seedArg) : Math.floor(Math.random() * 1_000_000);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got ${seedArg}`);
  const out = arg('--out') ?? (short ? undefined : join(__dirname, '..', 'docs', 'reliability-runs.md'));
  const started = Date.now();
  const log = (s: string) => console.log(`[chaos +${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s] ${s}`);
  const parallelismArg = arg('--parallelism');
  const o = withParallelism(
    presetOptions(
      clusterRun ? 'cluster' : soak ? (short ? 'soak-short' : 'soak') : short ? 'short' : 'full',
      seed,
      log,
    ),
    parallelismArg !== undefined ? Number(parallelismArg) : undefined,
  );
  try {
    const head = execSync('git rev-parse --short HEAD', { cwd: join(__dirname, '..'), encoding: 'utf8' }).trim();
    const dirty =
      execSync('git status --porcelain -- src scripts', { cwd: join(__dirname, '..'), encoding: 'utf8' }).trim() !== '';
    o.revision = `${head}${dirty ? ' + uncommitted changes' : ''}`;
  } catch {
    // not a git checkout (e.g. a `git archive` copy run beside work in progress): say which commit it is
    if (process.env.ONCEFLOW_CODE_REVISION) o.revision = process.env.ONCEFLOW_CODE_REVISION;
  }
  // What the campaign's stack runs (scripts/services.sh reads the same variables), for the report.
  o.kafkaVersion = process.env.ONCEFLOW_KAFKA_VERSION || '3.9.1';
  // A run directory keeps the Kafka version its data was formatted with: another version runs in its own.
  if (o.kafkaVersion !== '3.9.1') {
    o.runDir += `-kafka-${o.kafkaVersion}`;
    o.command = `ONCEFLOW_KAFKA_VERSION=${o.kafkaVersion} ${o.command}`;
  }
  const controllers = arg('--controllers');
  if (controllers !== undefined) {
    if (!clusterRun || controllers !== '3')
      throw new Error(`--controllers takes 3 (dedicated KRaft controllers), with --cluster; got ${controllers}`);
    o.kafkaControllers = 3;
    o.runDir += '-controllers';
    o.command += ' --controllers 3';
  }
  o.kafkaLayout = o.kafkaControllers
    ? `${o.kafkaNodes} brokers and ${o.kafkaControllers} dedicated KRaft controllers`
    : `${o.kafkaNodes ?? 1} combined broker+controller node${(o.kafkaNodes ?? 1) > 1 ? 's' : ''}`;
  const from = arg('--from');
  console.log(
    from
      ? `re-rendering the ${soak ? 'soak' : 'campaign'} report from ${from}`
      : `${soak ? 'soak' : 'fault campaign'}, seed ${seed} (replay: ${o.command})`,
  );
  try {
    const r = from
      ? rejudge(JSON.parse(readFileSync(from, 'utf8')) as CampaignResult, o.revision)
      : await runCampaign(o);
    for (const c of r.checks) console.log(`  ${c.ok ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`);
    for (const k of r.kinds)
      console.log(
        `  ${k.kind.padEnd(22)} injected ${String(k.injected).padStart(4)}  longest recovery ${k.longestRecoveryMs === null ? '—' : `${(k.longestRecoveryMs / 1000).toFixed(1)} s`}`,
      );
    // The raw figures, so a report can be re-rendered (--from) or compared later.
    if (!from) writeFileSync(join(o.runDir, 'campaign', 'result.json'), JSON.stringify(r, null, 2));
    if (out) {
      const doc = existsSync(out) ? readFileSync(out, 'utf8') : '';
      writeFileSync(
        out,
        soak
          ? spliceReport(doc, 'soak', renderSoak(r))
          : spliceReport(doc, clusterRun ? 'cluster' : 'campaign', renderReport(r)),
      );
      console.log(`report written to ${out}`);
    }
    if (r.ok)
      console.log(
        `RESULT: exactly once under every fault${soak ? `, ${soakVerdict(r.samples)}` : ''} (seed ${r.options.seed})`,
      );
    else console.log(`RESULT: FAILED — seed ${r.options.seed}; replay with: ${r.options.command}`);
    process.exitCode = r.ok ? 0 : 1;
  } catch (e) {
    console.error(
      `campaign failed: ${e instanceof Error ? e.stack : String(e)}\nseed ${seed}; replay with: ${o.command}`,
    );
    process.exitCode = 1;
  } finally {
    if (!from && !process.argv.includes('--keep-services')) {
      await services(
        {
          runDir: o.runDir,
          portBase: o.portBase,
          workers: o.workers,
          ...(o.kafkaNodes ? { kafkaNodes: o.kafkaNodes } : {}),
          ...(o.kafkaControllers ? { kafkaControllers: o.kafkaControllers } : {}),
        },
        ['down'],
      ).catch((e) => console.error(String(e)));
    }
  }
}

/**
 * A saved result judged again by this code: a soak's bounded-state checks (tools/chaos/bounds.ts)
 * recomputed from its samples, a campaign's kind-coverage check from its faults; the run's other
 * checks stay as measured.
 */
function rejudge(r: CampaignResult, revision: string | undefined): CampaignResult {
  if (r.options.mode !== 'soak') {
    // The kind-coverage check, recomputed from the run's faults by this code (a cluster run
    // schedules one stalled commit, which the first version of the check wanted 5 of).
    const coverage = kindCoverageCheck(r.kinds, r.faults, r.options.mode);
    const checks = r.checks.map((c) => (c.name === coverage.name ? coverage : c));
    return { ...r, checks, ok: checks.every((c) => c.ok), judgedBy: revision ?? 'unknown' };
  }
  const bounds = boundedStateChecks(r.samples, r.options);
  const names = new Set(bounds.map((c) => c.name));
  const checks = [...r.checks.filter((c) => !names.has(c.name)), ...bounds];
  return { ...r, checks, ok: checks.every((c) => c.ok), judgedBy: revision ?? 'unknown' };
}

void main();
