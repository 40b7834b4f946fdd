/**
 * onceflow as a user gets it: `npm pack`, the tarball installed into fresh projects outside the
 * repository (nothing imported from it), user transforms loaded through the CLI, and runs on the
 * real services ending with `onceflow verify`.
 *
 * - the orders example (examples/orders): `onceflow worker --transforms` + `onceflow start`,
 *   drained with `onceflow stop --drain --wait`, verified; the tables checked directly;
 * - a worker without the pipeline's transform: the pipeline fails with an error naming the
 *   pipeline, the transform and the flag;
 *
 * `onceflow init` and its scaffold, from a fresh clone as the README says: test/quickstart.test.ts.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RowDataPacket } from 'mysql2/promise';
import { openDeps, quietRuntime, uniqueName, waitUntil, type Deps } from './support/env';
import { ok, pack, sh, userEnv } from './support/package';

const ROOT = join(__dirname, '..');
let deps: Deps;
let work: string;
let tarball: string;
const children: ChildProcess[] = [];

/** A project of one's own: package.json depending on the tarball, then npm install. */
async function project(dir: string, files: Record<string, string> = {}): Promise<string> {
  mkdirSync(join(dir, 'src'), { recursive: true });
  const tsx = (
    JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }
  ).devDependencies.tsx;
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify(
      { name: 'user-project', private: true, dependencies: { onceflow: `file:${tarball}` }, devDependencies: { tsx } },
      null,
      2,
    ),
  );
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text);
  await ok('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], dir, 600_000);
  return dir;
}

function worker(dir: string, args: string[]): ChildProcess & { text: () => string } {
  const child = spawn(
    process.execPath,
    [join(dir, 'node_modules', 'onceflow', 'bin', 'onceflow.js'), 'worker', ...args],
    {
      cwd: dir,
      env: userEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let text = '';
  child.stdout?.on('data', (d: Buffer) => (text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (text += d.toString()));
  children.push(child);
  return Object.assign(child, { text: () => text });
}

const onceflow = (dir: string, ...args: string[]) =>
  sh(process.execPath, [join(dir, 'node_modules', 'onceflow', 'bin', 'onceflow.js'), ...args], dir);

before(async () => {
  quietRuntime();
  deps = await openDeps();
  work = mkdtempSync(join(tmpdir(), 'onceflow-package-'));
  tarball = await pack(ROOT, work);
});

after(async () => {
  for (const c of children) c.kill('SIGTERM');
  await deps?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the tarball holds compiled JavaScript with declarations, the bin, the config schema — and no sources or harness', async () => {
  const files = (await ok('tar', ['tzf', tarball], work)).split('\n').filter(Boolean);
  for (const f of [
    'package/dist/index.js',
    'package/dist/index.d.ts',
    'package/dist/workflows/index.js',
    'package/dist/workflows/index.d.ts',
    'package/bin/onceflow.js',
    'package/schema/pipeline-config.schema.json',
    'package/package.json',
  ]) {
    assert.ok(files.includes(f), `${f} is missing from the tarball`);
  }
  assert.deepEqual(
    files.filter(
      (f) =>
        /^package\/(src|test|tools|scripts|examples|docs)\//.test(f) || (f.endsWith('.ts') && !f.endsWith('.d.ts')),
    ),
    [],
  );
});

test(
  'the orders example in a project that installed only the tarball: worker --transforms, start, drain, verify; a worker without the transform refuses the pipeline',
  { timeout: 900_000 },
  async () => {
    const name = uniqueName('orders');
    const table = name.replace(/[^a-z0-9]/g, '_');
    const dir = join(work, 'orders-app');
    await project(dir);
    copyFileSync(join(ROOT, 'examples', 'orders', 'transforms.ts'), join(dir, 'src', 'transforms.ts'));
    // A JavaScript module with some other transform: what a worker started with the wrong module has.
    writeFileSync(
      join(dir, 'src', 'other.js'),
      'exports.transforms = { other: { map: (r) => ({ kafka: [{ value: r.value }] }) } };\n',
    );
    const config = (pipeline: string, taskQueue: string) =>
      readFileSync(join(ROOT, 'examples', 'orders', 'pipeline.yaml'), 'utf8')
        .replace('name: orders', `name: ${pipeline}`)
        .replace('topic: orders\n', `topic: ${name}.orders\n`)
        .replace('topic: order-events', `topic: ${name}.events`)
        .replace('deadLetterTopic: orders.dead-letters', `deadLetterTopic: ${name}.dlq`)
        .replace(
          'outputPartitions: 3',
          `outputPartitions: 3\n    latestTable: ${table}_latest\n    totalsTable: ${table}_totals`,
        )
        .replace('- name: orders_latest', `- name: ${table}_latest`)
        .replace('- name: customer_totals', `- name: ${table}_totals`)
        .replace('taskQueue: orders', `taskQueue: ${taskQueue}`);
    writeFileSync(join(dir, 'pipeline.yaml'), config(name, `${name}-tq`));
    writeFileSync(join(dir, 'missing.yaml'), config(`${name}-nt`, `${name}-nt-tq`));

    await deps.admin.createTopics({
      waitForLeaders: true,
      topics: [
        { topic: `${name}.orders`, numPartitions: 2 },
        { topic: `${name}.events`, numPartitions: 3 },
      ],
    });
    // 200 orders (keyed by order id, so an order's updates stay in one partition), 60 of them
    // updated to 'shipped' later, and 4 malformed records.
    const customers = Array.from({ length: 17 }, (_, i) => `c-${i}`);
    const orders = Array.from({ length: 200 }, (_, i) => ({
      id: `o-${i}`,
      customer: customers[(i * 7) % 17]!,
      items: [{ sku: `s-${i % 5}`, qty: 1 + (i % 3), price: 2.5 + (i % 4) }],
      status: 'paid',
    }));
    const updates = orders.slice(0, 60).map((o) => ({ ...o, status: 'shipped' }));
    const bad = [
      '{not json',
      JSON.stringify({ id: 'x-1', items: [] }),
      JSON.stringify({ id: 'x-2', customer: 'c-1', items: [{ sku: 'a', qty: 0, price: 1 }] }),
      JSON.stringify({ id: 'x-3', customer: 'c-1', items: [{ sku: 'a', qty: 1, price: 1 }], status: 'lost' }),
    ];
    const producer = deps.kafka.producer();
    await producer.connect();
    await producer.send({
      topic: `${name}.orders`,
      messages: [...orders, ...updates].map((o) => ({ key: o.id, value: JSON.stringify(o) })),
    });
    await producer.send({ topic: `${name}.orders`, messages: bad.map((value, i) => ({ key: `bad-${i}`, value })) });
    await producer.disconnect();

    // A worker that does not have the pipeline's transform: the pipeline fails, and says why.
    const wrong = worker(dir, ['--transforms', 'src/other.js', '--task-queue', `${name}-nt-tq`]);
    assert.equal((await onceflow(dir, 'start', 'missing.yaml')).code, 0);
    const failure = await deps.client.workflow
      .getHandle(`onceflow/${name}-nt`)
      .result()
      .then(
        () => 'completed',
        (e: unknown) => {
          const chain: string[] = [];
          for (let c = e as { message?: string; cause?: unknown } | undefined; c; c = c.cause as typeof c)
            chain.push(String(c.message));
          return chain.join(' ← ');
        },
      );
    assert.match(
      failure,
      new RegExp(`pipeline '${name}-nt' uses transform 'orders', which is not registered here \\(registered: other\\)`),
    );
    assert.match(failure, /--transforms <module>/);
    wrong.kill('SIGTERM');

    const w = worker(dir, ['--transforms', 'src/transforms.ts', '--task-queue', `${name}-tq`]);
    const started = await onceflow(dir, 'start', 'pipeline.yaml');
    assert.equal(started.code, 0, started.err);
    const stopped = await onceflow(dir, 'stop', name, '--drain', '--wait');
    assert.equal(stopped.code, 0, `${stopped.out}\n${stopped.err}\nworker:\n${w.text()}`);
    const verified = await onceflow(dir, 'verify', name, '--transforms', 'src/transforms.ts');
    assert.equal(verified.code, 0, `${verified.out}\n${verified.err}`);
    // The progress view, not the full log: no stack traces on the worker's terminal.
    await waitUntil('a progress line from the worker', async () => /epochs \d+\s+records/.test(w.text()), 15_000);
    assert.doesNotMatch(w.text(), /\n\s+at /);

    const [latest] = await deps.pool.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n, SUM(status = 'shipped') AS shipped FROM \`${table}_latest\``,
    );
    assert.deepEqual([Number(latest[0]!.n), Number(latest[0]!.shipped)], [200, 60]);
    const cents = (o: (typeof orders)[number]) => o.items.reduce((s, it) => s + it.qty * Math.round(it.price * 100), 0);
    const [totals] = await deps.pool.query<RowDataPacket[]>(
      `SELECT SUM(orders) AS orders, SUM(revenue_cents) AS revenue FROM \`${table}_totals\``,
    );
    assert.deepEqual(
      [Number(totals[0]!.orders), Number(totals[0]!.revenue)],
      [260, [...orders, ...updates].reduce((s, o) => s + cents(o), 0)],
    );
  },
);
