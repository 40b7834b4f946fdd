/**
 * The README's quick start, literally: its command blocks ("Your own pipeline") are read from
 * README.md and run line by line as a newcomer would type them — the first in a fresh `git clone`
 * of this repository (so only committed files count), the second in a fresh directory outside it
 * — against the real services: install + pack, `init` from the local tarball, the scaffold's own
 * `npm install` and `npm test`, its topics and sample input, `run --drain`, `verify`; then the
 * table is compared with the sample input. The only substitutions: the tarball's real path for
 * the README's placeholder, and a unique project name for `my-pipeline` (topics, table and
 * pipeline are named after it). Slow (an `npm ci` in the clone): see the timings it prints.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { RowDataPacket } from 'mysql2/promise';
import { openDeps, quietRuntime, uniqueName, type Deps } from './support/env';
import { ok, sh, userEnv } from './support/package';

const ROOT = join(__dirname, '..');
const PLACEHOLDER = '/path/to/onceflow-0.1.0.tgz';
let deps: Deps | undefined;
let work: string | undefined;
let tarball: string | undefined;

/** The fenced `sh` blocks of the README section "Your own pipeline". */
function quickStartBlocks(readme: string): string[][] {
  const section = /^## Your own pipeline\n([\s\S]*?)(?=^## )/m.exec(readme)?.[1];
  assert.ok(section, 'README.md has no "## Your own pipeline" section');
  return [...section.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((m) =>
    m[1]!
      .split('\n')
      .map((l) => l.replace(/(^|\s+)#.*$/, '').trim())
      .filter(Boolean),
  );
}

// Lean, not different: npm's own settings for "use the cache you have" and "no audit/fund calls".
const env = userEnv({
  npm_config_prefer_offline: 'true',
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
});

after(async () => {
  await deps?.close();
  if (work) rmSync(work, { recursive: true, force: true });
  // npx keeps what it installed for `--package=<tgz>` under the npm cache; this tarball is gone now.
  const npx = join(homedir(), '.npm', '_npx');
  if (tarball && existsSync(npx)) {
    for (const d of readdirSync(npx)) {
      const pkg = join(npx, d, 'package.json');
      if (existsSync(pkg) && readFileSync(pkg, 'utf8').includes(tarball))
        rmSync(join(npx, d), { recursive: true, force: true });
    }
  }
});

test(
  "the README's quick start, typed literally into a fresh clone and a fresh project, runs a pipeline exactly once",
  { timeout: 1_500_000 },
  async (t) => {
    quietRuntime();
    deps = await openDeps();
    const dirty = (
      await ok(
        'git',
        ['status', '--porcelain', '--', 'README.md', 'src', 'bin', 'package.json', 'package-lock.json'],
        ROOT,
      )
    ).trim();
    if (dirty) t.diagnostic(`uncommitted changes are not in the clone this test runs (commit first):\n${dirty}`);

    const blocks = quickStartBlocks(readFileSync(join(ROOT, 'README.md'), 'utf8'));
    assert.equal(
      blocks.length,
      2,
      `expected two command blocks (in the clone; in a project of your own), found ${blocks.length}`,
    );
    const [inClone, inProject] = blocks as [string[], string[]];
    assert.ok(
      inProject.some((l) => l.includes(PLACEHOLDER)),
      `the project block no longer names the tarball as ${PLACEHOLDER}; update this test with the README`,
    );

    work = mkdtempSync(join(tmpdir(), 'onceflow-quickstart-'));
    const clone = join(work, 'onceflow');
    await ok('git', ['clone', '--quiet', ROOT, clone], work);
    tarball = join(clone, 'onceflow-0.1.0.tgz');
    const name = uniqueName('qs');
    const projects = join(work, 'elsewhere');
    mkdirSync(projects);

    const timings: string[] = [];
    const runBlock = async (lines: string[], start: string) => {
      let cwd = start;
      for (const typed of lines) {
        const line = typed.replaceAll(PLACEHOLDER, tarball!).replace(/\bmy-pipeline\b/g, name);
        const cd = /^cd\s+(\S+)$/.exec(line);
        if (cd) {
          cwd = resolve(cwd, cd[1]!);
          continue;
        }
        const began = Date.now();
        const r = await sh('bash', ['-c', line], cwd, 900_000, env);
        timings.push(`${line}: ${((Date.now() - began) / 1000).toFixed(1)} s`);
        assert.equal(
          r.code,
          0,
          `README quick start: \`${typed}\` (run as \`${line}\` in ${cwd}) exited ${r.code}:\n${r.out.slice(-4000)}\n${r.err.slice(-4000)}`,
        );
        if (/onceflow run .*--drain/.test(line))
          assert.match(r.err + r.out, /records 5\b/, 'the drained run did not process the 5 sample events');
        if (/verify/.test(line)) assert.match(r.out, /RESULT: exactly once/);
      }
    };

    await runBlock(inClone, clone);
    assert.ok(existsSync(tarball), `the clone block did not make ${tarball}`);
    await runBlock(inProject, projects);
    t.diagnostic(`timings:\n  ${timings.join('\n  ')}`);

    // The project depends on the tarball it was made from (no flag given), and the table holds
    // each word of the sample input once per occurrence.
    const dir = join(projects, name);
    assert.equal(
      (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies: Record<string, string> })
        .dependencies.onceflow,
      `file:${tarball}`,
    );
    const expected: Record<string, number> = {};
    for (const line of readFileSync(join(dir, 'events.jsonl'), 'utf8').split('\n').filter(Boolean)) {
      for (const w of (JSON.parse(line) as { text: string }).text.toLowerCase().match(/[a-z0-9']+/g) ?? [])
        expected[w] = (expected[w] ?? 0) + 1;
    }
    const [rows] = await deps.pool.query<RowDataPacket[]>(
      `SELECT word, n FROM \`${name.replace(/[^a-z0-9]+/g, '_')}_word_counts\``,
    );
    assert.deepEqual(Object.fromEntries(rows.map((r) => [r.word, Number(r.n)])), expected);
  },
);
