/**
 * `npm run chaos [-- --seed N] [--short] [--out FILE] [--keep-services]`
 * `npm run soak  [-- --seed N] [--short] [--out FILE] [--keep-services]`  (this file with --soak)
 * Runs the fault campaign (tools/chaos/) — or the soak, the same campaign over an hour with
 * faults minutes apart and its state sampled — on its own isolated service stack, prints the
 * verdict, writes its part of docs/reliability.md (full runs) and stops the stack. Exit code 1
 * on any failed check; a failing run prints its seed and the command that replays it.
 */
import { execSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCampaign } from '../tools/chaos/campaign';
import { presetOptions } from '../tools/chaos/presets';
import { renderReport, renderSoak, spliceReport } from '../tools/chaos/report';
import { services } from '../tools/chaos/stack';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main() {
  const short = process.argv.includes('--short');
  const soak = process.argv.includes('--soak');
  const seedArg = arg('--seed');
  const seed = seedArg !== undefined ? Number(seedArg) : Math.floor(Math.random() * 1_000_000);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got ${seedArg}`);
  const out = arg('--out') ?? (short ? undefined : join(__dirname, '..', 'docs', 'reliability.md'));
  const started = Date.now();
  const log = (s: string) => console.log(`[chaos +${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s] ${s}`);
  const o = presetOptions(soak ? (short ? 'soak-short' : 'soak') : short ? 'short' : 'full', seed, log);
  try {
    const head = execSync('git rev-parse --short HEAD', { cwd: join(__dirname, '..'), encoding: 'utf8' }).trim();
    const dirty = execSync('git status --porcelain -- src scripts', { cwd: join(__dirname, '..'), encoding: 'utf8' }).trim() !== '';
    o.revision = `${head}${dirty ? ' + uncommitted changes' : ''}`;
  } catch {
    // not a git checkout
  }
  console.log(`${soak ? 'soak' : 'fault campaign'}, seed ${seed} (replay: ${o.command})`);
  try {
    const r = await runCampaign(o);
    for (const c of r.checks) console.log(`  ${c.ok ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}`);
    for (const k of r.kinds) console.log(`  ${k.kind.padEnd(22)} injected ${String(k.injected).padStart(4)}  longest recovery ${k.longestRecoveryMs === null ? '—' : `${(k.longestRecoveryMs / 1000).toFixed(1)} s`}`);
    // The raw figures, so a report can be re-rendered or compared later.
    writeFileSync(join(o.runDir, 'campaign', 'result.json'), JSON.stringify(r, null, 2));
    if (out) {
      const doc = existsSync(out) ? readFileSync(out, 'utf8') : '';
      writeFileSync(out, soak ? spliceReport(doc, 'soak', renderSoak(r)) : spliceReport(doc, 'campaign', renderReport(r)));
      console.log(`report written to ${out}`);
    }
    if (r.ok) console.log(`RESULT: exactly once under every fault${soak ? ', state bounded' : ''} (seed ${seed})`);
    else console.log(`RESULT: FAILED — seed ${seed}; replay with: ${o.command}`);
    process.exitCode = r.ok ? 0 : 1;
  } catch (e) {
    console.error(`campaign failed: ${e instanceof Error ? e.stack : String(e)}\nseed ${seed}; replay with: ${o.command}`);
    process.exitCode = 1;
  } finally {
    if (!process.argv.includes('--keep-services')) {
      await services({ runDir: o.runDir, portBase: o.portBase, workers: o.workers }, ['down']).catch((e) => console.error(String(e)));
    }
  }
}

void main();
