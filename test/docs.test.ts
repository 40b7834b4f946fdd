/**
 * Docs that stay true: every repository path and every code symbol a document names must still
 * exist. Paths (src/…, test/…, tools/…, scripts/…, docs/…, schema/…, examples/…, backticked or
 * not, and relative Markdown links) must be in the work tree; backticked identifiers that look
 * like code (camelCase, PascalCase, SCREAMING_CASE, onceflow_ names, dotted fields, calls, patch
 * ids) must occur as a word somewhere in src/, tools/, scripts/ or test/. Words that are not ours (Kafka API
 * names, settings of other systems) are in NOT_SYMBOLS, which fails too when an entry is no
 * longer needed. Checked: the design, the user docs, the two report summaries and the README (not
 * the history and run logs, which name what was true then). Unit tier: reads files only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

const ROOT = join(__dirname, '..');
const DOCS = [
  'docs/design.md',
  'docs/usage.md',
  'docs/deploy.md',
  'docs/services.md',
  'docs/results.md',
  'docs/reliability.md',
  'docs/performance.md',
  'README.md',
];
const CODE_DIRS = ['src', 'tools', 'scripts', 'test'];
const PATH_ROOTS = ['src', 'test', 'tools', 'scripts', 'docs', 'schema', 'examples'];

/**
 * Backticked words that look like code but name something outside this repository. Each entry
 * must be needed: one that no checked document uses, or that the code now contains, fails.
 */
const NOT_SYMBOLS = new Set<string>([
  // Flink and Kafka Streams
  'FlinkKafkaProducer',
  'EXACTLY_ONCE', // Semantic.EXACTLY_ONCE
  'TwoPhaseCommitSinkFunction',
  'LogAndFailExceptionHandler',
  // Kafka's and MySQL's own names
  'INVALID_TRANSACTION_TIMEOUT', // an error code
  'INNODB_TRX', // an information_schema table
  // MSK IAM policy actions (kafka-cluster:…)
  'ReadData',
  'WriteData',
  'DescribeTopic',
  'CreateTopic',
  'AlterTopic',
  'DescribeGroup',
  'AlterGroup',
  'DescribeTransactionalId',
  'AlterTransactionalId',
]);

/** Paths that are not this repository's: files of a project `onceflow init` scaffolds. Same rule. */
const NOT_PATHS = new Set<string>(['src/transforms.ts']);
/** Paths that runs make (scripts/test.sh creates test/.tmp/): there or not, they are right. */
const MADE_BY_RUNS = new Set<string>(['test/.tmp/']);

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === '.tmp' || name === 'histories') continue;
    const p = join(dir, name);
    // This file lists the words that are not in the code; it must not find them in itself.
    if (p === __filename) continue;
    if (statSync(p).isDirectory()) walk(p, out);
    else if (/\.(ts|js|sh|go|json|yaml|yml|xml|properties)$/.test(name)) out.push(p);
  }
  return out;
}

/** Every word of the code, and the code itself for names with hyphens (patch ids). */
function codeIndex(): { words: Set<string>; text: string } {
  const text = CODE_DIRS.flatMap((d) => walk(join(ROOT, d)))
    .map((f) => readFileSync(f, 'utf8'))
    .join('\n');
  return { words: new Set(text.split(/[^A-Za-z0-9_$]+/)), text };
}

/** Repository paths written in a document, with their line numbers. */
export function pathsIn(doc: string): { path: string; line: number }[] {
  const out: { path: string; line: number }[] = [];
  const re = new RegExp(`(?<![A-Za-z0-9_.\\-/@<])((?:${PATH_ROOTS.join('|')})/[A-Za-z0-9_.\\-/]*)`, 'g');
  doc.split('\n').forEach((text, i) => {
    for (const m of text.matchAll(re)) {
      const end = m.index! + m[0].length;
      // A placeholder (`bench/results/<date>.json`, `src/*.ts`) names no one file.
      if (/^[<*{]/.test(text.slice(end, end + 1))) continue;
      const path = m[1]!.replace(/[.]+$/, '');
      out.push({ path, line: i + 1 });
    }
  });
  return out;
}

/** Relative Markdown link targets (no scheme, no pure anchor), resolved against the document's folder. */
export function linksIn(doc: string, docPath: string): { path: string; line: number }[] {
  const out: { path: string; line: number }[] = [];
  doc.split('\n').forEach((text, i) => {
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = decodeURIComponent(m[1]!.replace(/#.*$/, ''));
      if (!target || /^[a-z]+:/.test(target)) continue;
      out.push({ path: relative(ROOT, join(ROOT, dirname(docPath), target)), line: i + 1 });
    }
  });
  return out;
}

/**
 * Code names in backticks: a whole span that is an identifier (camelCase with a capital inside,
 * PascalCase of two words or more, SCREAMING_CASE with an underscore, onceflow_… tables and
 * metrics), a dotted name (each such
 * segment), a call (`name(…)`), or a patch id (`patched('x-v1')`, `x-v1`).
 */
export function symbolsIn(doc: string): { symbol: string; line: number; hyphenated: boolean }[] {
  const out: { symbol: string; line: number; hyphenated: boolean }[] = [];
  const looksLikeCode = (w: string) =>
    /^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$/.test(w) ||
    /^[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*$/.test(w) ||
    /^[A-Z][A-Z0-9]*_[A-Z0-9_]+$/.test(w) ||
    /^onceflow_[a-z0-9_]+$/.test(w);
  doc.split('\n').forEach((text, i) => {
    for (const m of text.matchAll(/`([^`\n]+)`/g)) {
      const span = m[1]!.trim();
      const patch = /^(?:patched\(')?([a-z][a-z0-9]*(?:-[a-z0-9]+)*-v\d+)(?:'\))?$/.exec(span);
      if (patch) {
        out.push({ symbol: patch[1]!, line: i + 1, hyphenated: true });
        continue;
      }
      // A call names its function; a metric its name without the labels (`onceflow_halts_total{cause}`).
      const call = /^([A-Za-z_$][\w$]*)(?:\(.*\)|\{[\w,]*\})$/.exec(span);
      const name = call ? call[1]! : span;
      if (!/^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*$/.test(name)) continue;
      for (const seg of name.split('.'))
        if (looksLikeCode(seg)) out.push({ symbol: seg, line: i + 1, hyphenated: false });
    }
  });
  return out;
}

test('docs name only paths and code symbols that exist', () => {
  const code = codeIndex();
  const problems: string[] = [];
  const allowed = new Set<string>();
  for (const docPath of DOCS) {
    const doc = readFileSync(join(ROOT, docPath), 'utf8');
    if (docPath === 'README.md' && !linksIn(doc, docPath).length)
      problems.push('README.md: no relative links found: is the link pattern still right?');
    for (const { path, line } of [...pathsIn(doc), ...linksIn(doc, docPath)]) {
      if (MADE_BY_RUNS.has(path)) allowed.add(path);
      if (existsSync(join(ROOT, path)) || MADE_BY_RUNS.has(path)) continue;
      if (NOT_PATHS.has(path)) allowed.add(path);
      else
        problems.push(
          `${docPath}:${line}: path ${path} does not exist (moved? or add it to NOT_PATHS if it is not this repository's)`,
        );
    }
    for (const { symbol, line, hyphenated } of symbolsIn(doc)) {
      const found = hyphenated ? code.text.includes(symbol) : code.words.has(symbol);
      if (found) continue;
      if (NOT_SYMBOLS.has(symbol)) allowed.add(symbol);
      else
        problems.push(
          `${docPath}:${line}: \`${symbol}\` occurs nowhere in ${CODE_DIRS.join('/, ')}/ (renamed? or add it to NOT_SYMBOLS if it is not ours)`,
        );
    }
  }
  for (const w of NOT_SYMBOLS) {
    if (code.words.has(w)) problems.push(`NOT_SYMBOLS: '${w}' occurs in the code now: take it off the list`);
    else if (!allowed.has(w))
      problems.push(`NOT_SYMBOLS: '${w}' is used by none of ${DOCS.join(', ')}: take it off the list`);
  }
  for (const p of MADE_BY_RUNS)
    if (!allowed.has(p))
      problems.push(`MADE_BY_RUNS: '${p}' is named by none of ${DOCS.join(', ')}: take it off the list`);
  for (const p of NOT_PATHS) {
    if (existsSync(join(ROOT, p)))
      problems.push(`NOT_PATHS: '${p}' exists in this repository now: take it off the list`);
    else if (!allowed.has(p))
      problems.push(`NOT_PATHS: '${p}' is named by none of ${DOCS.join(', ')}: take it off the list`);
  }
  assert.deepEqual(problems, []);
});

test('the docs check finds what it is meant to find', () => {
  const doc =
    "See `src/nowhere.ts`, src/kafka/outcome.ts, `bench/results/<date>.json` and [d](design.md#x).\n`commitOrFindOut` and `spec.deadLetter` and `patched('advance-epoch-v1')`, not `EndTxn(commit)` or `a b`; `onceflow_halts_total{cause}`.";
  assert.deepEqual(
    pathsIn(doc).map((p) => p.path),
    ['src/nowhere.ts', 'src/kafka/outcome.ts'],
  );
  assert.deepEqual(
    linksIn(doc, 'docs/usage.md').map((p) => p.path),
    ['docs/design.md'],
  );
  assert.deepEqual(
    symbolsIn(doc).map((s) => s.symbol),
    ['commitOrFindOut', 'deadLetter', 'advance-epoch-v1', 'EndTxn', 'onceflow_halts_total'],
  );
});

/** The lines before a page's first `## ` heading: what a reader sees first. */
const firstScreen = (page: string) =>
  page
    .slice(0, page.search(/^## /m) >= 0 ? page.search(/^## /m) : page.length)
    .trimEnd()
    .split('\n');
const SCREEN_LINES = 40;

test('performance.md opens, on one screen, with the figures of the run its generated part shows', () => {
  const page = readFileSync(join(ROOT, 'docs/performance.md'), 'utf8');
  const screen = firstScreen(page);
  assert.ok(
    screen.length <= SCREEN_LINES,
    `docs/performance.md: ${screen.length} lines before its first section, at most ${SCREEN_LINES}`,
  );
  const block = /<!-- bench:begin[^\n]*-->\n([\s\S]*?)<!-- bench:end -->/.exec(page)?.[1];
  assert.ok(block, 'docs/performance.md has no generated part (bench:begin … bench:end)');
  const run = /^Run of (\d{4}-\d\d-\d\d)T[\d:.]+Z \(([^)]+)\)/.exec(block);
  assert.ok(run, 'the generated part names no run');
  const text = screen.join('\n');
  // After `npm run bench` renders a new run, the summary must be rewritten from it.
  for (const named of [run[1]!, run[2]!])
    assert.ok(
      text.includes(named),
      `docs/performance.md's first screen does not name the generated run's ${named}: rewrite it from the new run`,
    );
  const figures = [...text.matchAll(/\b\d{1,3}(?:,\d{3})+\b|\*\*\d+\.\d\d\*\*/g)].map((m) => m[0]);
  assert.ok(figures.length >= 10, `only ${figures.length} figures on performance.md's first screen`);
  const stale = figures.filter((f) => !block.includes(f));
  assert.deepEqual(stale, [], "figures on docs/performance.md's first screen that the generated run does not show");
});

test('reliability.md opens, on one screen, with every report it summarises', () => {
  const page = readFileSync(join(ROOT, 'docs/reliability.md'), 'utf8');
  const screen = firstScreen(page);
  assert.ok(
    screen.length <= SCREEN_LINES,
    `docs/reliability.md: ${screen.length} lines before its first section, at most ${SCREEN_LINES}`,
  );
  const rows = screen.filter((l) => l.startsWith('| '));
  const reports: { from: string; text: string }[] = readFileSync(join(ROOT, 'docs/reliability-runs.md'), 'utf8')
    .split(/(?=<!-- (?:soak|cluster campaign) report)/)
    .map((text) => ({ from: 'docs/reliability-runs.md', text }));
  for (const f of readdirSync(join(ROOT, 'docs/campaigns')))
    reports.push({ from: `docs/campaigns/${f}`, text: readFileSync(join(ROOT, 'docs/campaigns', f), 'utf8') });
  assert.ok(reports.length >= 3);
  for (const r of reports) {
    const seed = /\| seed \| (\d+) \|/.exec(r.text)?.[1] ?? /--seed (\d+)/.exec(r.text)?.[1];
    const code = /\| code \| `([^`]+)` \|/.exec(r.text)?.[1] ?? /code `([0-9a-f]{7,})`/.exec(r.text)?.[1];
    const result = /Result: \*\*(PASS|FAIL)/.exec(r.text)?.[1];
    assert.ok(seed && code && result, `${r.from}: a report without seed, code or result`);
    // A new run (npm run chaos / soak, or one saved under campaigns/) must reach the summary.
    assert.ok(
      rows.some((l) => l.includes(`| ${seed} |`) && l.includes(`\`${code}\``)),
      `docs/reliability.md's table has no row for the ${result} run of seed ${seed} on code ${code} (${r.from}): add it`,
    );
  }
});
