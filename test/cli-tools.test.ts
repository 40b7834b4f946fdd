/**
 * The CLI's own voice and input help, on the real services: --help of every command (from the
 * argument table, which dispatch cannot bypass), --version, `topics create` (idempotent, a bad
 * broker in one line), `produce` (keys, and a bad line named by number with nothing produced), a
 * wrong broker as one clear line on the terminal with kafkajs's detail in the log file, the log
 * file holding the worker's info lines, `status` naming why a pipeline whose setup failed never
 * started its partitions, and `export-history` of a history whose page is over 4 MiB.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { stringify } from 'yaml';
import { Worker } from '@temporalio/worker';
import { COMMANDS, GLOBAL_OPTIONS } from '../src/cli/commands';
import { ISOLATION, latestOffset } from '../src/kafka/internals';
import { readAll } from '../src/verify';
import { pipelineWorkflowId } from '../src/spec';
import { COMPARE_TABLE } from '../examples/flink-compare/transform';
import { openDeps, quietRuntime, uniqueName, type Deps } from './support/env';
import { cli } from './support/cli';

const ROOT = join(__dirname, '..');
const BIN = join(ROOT, 'bin', 'onceflow.js');
const TRANSFORMS = join(ROOT, 'examples', 'flink-compare', 'transforms.ts');
const tmp = join(__dirname, '.tmp');
let deps: Deps;
const started: string[] = [];

/** A pipeline config of its own (unique names), written to a file; `over` replaces top-level parts. */
function configFile(
  name: string,
  over: { pipeline?: Record<string, unknown>; connections?: Record<string, unknown> } = {},
): string {
  const table = `t_${name.replace(/[^a-z0-9]/g, '_')}`;
  const file = join(tmp, `${name}.yaml`);
  writeFileSync(
    file,
    stringify({
      pipeline: {
        name,
        source: { topic: `${name}.in` },
        transform: 'flink-compare',
        transformOptions: { table },
        kafkaSink: { topic: `${name}.out` },
        mysqlSink: { tables: [{ ...COMPARE_TABLE, name: table }] },
        epoch: { maxRecords: 50, maxWaitMs: 300 },
        ...over.pipeline,
      },
      taskQueue: name,
      connections: { mysql: { password: deps.settings.mysql.password }, ...over.connections },
    }),
  );
  return file;
}

before(async () => {
  quietRuntime();
  deps = await openDeps();
  mkdirSync(tmp, { recursive: true });
});

after(async () => {
  for (const name of started)
    await deps.client.workflow
      .getHandle(pipelineWorkflowId(name))
      .terminate('cli-tools.test.ts over')
      .catch(() => undefined);
  await deps.close();
});

test('every command has --help (exit 0, its arguments and options), dispatch knows no command the table lacks, and --version', async () => {
  // The dispatch's cases and the argument table name the same commands.
  const cases = [...readFileSync(join(ROOT, 'src', 'cli', 'index.ts'), 'utf8').matchAll(/^\s*case '([a-z-]+)':/gm)]
    .map((m) => m[1]!)
    .sort();
  assert.deepEqual(
    cases,
    Object.keys(COMMANDS).sort(),
    'src/cli/index.ts dispatches exactly the commands of src/cli/commands.ts',
  );
  for (const [name, spec] of Object.entries(COMMANDS)) {
    const r = await cli(name, '--help');
    assert.equal(r.code, 0, `${name} --help: ${r.err}`);
    assert.match(r.out, new RegExp(`^usage: onceflow ${name}\\b`), `${name} --help`);
    assert.ok(r.out.includes(spec.summary), `${name} --help gives its summary`);
    for (const o of [...spec.options, ...GLOBAL_OPTIONS])
      assert.ok(r.out.includes(`--${o}`), `${name} --help names --${o}`);
  }
  const all = await cli('--help');
  assert.equal(all.code, 0);
  for (const name of Object.keys(COMMANDS))
    assert.match(all.out, new RegExp(`^  ${name}\\b`, 'm'), `onceflow --help lists ${name}`);
  const v = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8' });
  assert.equal(v.status, 0);
  assert.equal(
    v.stdout,
    `onceflow ${(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version}\n`,
  );
  const wrong = await cli('status', '--drain');
  assert.equal(wrong.code, 2);
  assert.match(wrong.err, /--drain does not apply to 'status'/);
});

test('topics create makes the source topics (idempotent); a bad broker is one clear line', async () => {
  const name = uniqueName('topics');
  const file = configFile(name, { pipeline: { source: { topics: [`${name}.a`, `${name}.b`] } } });
  let r = await cli('topics', 'create', file, '--partitions', '3');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, new RegExp(`created ${name}\\.a \\(3 partitions\\)\\ncreated ${name}\\.b \\(3 partitions\\)`));
  const meta = await deps.admin.fetchTopicMetadata({ topics: [`${name}.a`, `${name}.b`] });
  assert.deepEqual(
    meta.topics.map((t) => t.partitions.length),
    [3, 3],
  );
  r = await cli('topics', 'create', file, '--partitions', '5');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, new RegExp(`exists  ${name}\\.a \\(3 partitions\\)`), 'an existing topic is left as it is');
  r = await cli('topics', 'create', configFile(`${name}-x`, { connections: { kafka: { brokers: ['127.0.0.1:1'] } } }));
  assert.equal(r.code, 1);
  assert.equal(r.err.trim().split('\n').length, 1, r.err);
  assert.match(r.err, /cannot reach Kafka at 127\.0\.0\.1:1/);
  r = await cli('topics', 'delete', file);
  assert.equal(r.code, 2);
});

test('init, produce and replay of a history file run without the MySQL password; a command that opens MySQL names the setting', async () => {
  const name = uniqueName('nopw');
  assert.equal((await cli('topics', 'create', configFile(name))).code, 0);
  const events = join(tmp, `${name}.jsonl`);
  writeFileSync(events, '{"id":"a"}\n');
  const saved = { ...process.env };
  try {
    delete process.env.ONCEFLOW_MYSQL_PASSWORD;
    delete process.env.ONCEFLOW_MYSQL_PASSWORD_FILE;
    process.env.ONCEFLOW_SERVICES_ENV = join(tmp, 'no-services-file.env');
    process.env.ONCEFLOW_KAFKA_BROKERS = deps.settings.kafka.brokers.join(',');
    let r = await cli('init', join(tmp, name), '--onceflow', 'file:onceflow.tgz');
    assert.equal(r.code, 0, r.err);
    r = await cli('produce', `${name}.in`, '--file', events, '--key', 'id');
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /produced 1 record/);
    r = await cli('replay', join(__dirname, 'histories', 'partition-compare-sink-retries-0.json'));
    assert.equal(r.code, 0, r.out + r.err);
    r = await cli('status', name);
    assert.equal(r.code, 2);
    assert.match(r.err, /ONCEFLOW_MYSQL_PASSWORD is not set/);
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  }
});

test("export-history reads a history over gRPC's 4 MiB default message size (a group workflow over 256 partitions makes one), and a worker runs it", async () => {
  // A workflow no worker has run yet, with three 1.5 MB signals in its history: one page of about 4.5 MB.
  const workflowId = uniqueName('bighistory');
  const handle = await deps.client.workflow.start('smokeWorkflow', {
    taskQueue: workflowId,
    workflowId,
    args: ['big history'],
  });
  try {
    for (let i = 0; i < 3; i++) await handle.signal('big', String(i).repeat(1_500_000));
    const file = join(tmp, `${workflowId}.json`);
    const r = await cli('export-history', workflowId, '--out', file);
    assert.equal(r.code, 0, r.err);
    const size = statSync(file).size;
    assert.ok(size > 4 * 1024 * 1024, `the history written is ${size} bytes, not over 4 MiB`);
    // The worker's connection (Rust core) takes the same page in its first workflow task.
    const worker = await Worker.create({
      taskQueue: workflowId,
      workflowsPath: require.resolve('./workflows/smoke'),
      activities: { greet: async (name: string) => `hello ${name}` },
    });
    assert.equal(await worker.runUntil(handle.result()), 'hello big history');
  } finally {
    await handle.terminate('cli-tools.test.ts over').catch(() => undefined);
  }
});

test('produce sends one record per line with its key; a bad line is named and nothing is produced', async () => {
  const name = uniqueName('produce');
  const topic = `${name}.in`;
  assert.equal((await cli('topics', 'create', configFile(name))).code, 0);
  const good = join(tmp, `${name}.jsonl`);
  const events = [
    { id: 'a', n: 1 },
    { id: 'b', n: 2 },
    { id: 7, n: 3 },
  ];
  writeFileSync(good, `${events.map((e) => JSON.stringify(e)).join('\n')}\n\n`);
  let r = await cli('produce', topic, '--file', good, '--key', 'id');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /produced 3 records/);
  const read = await readAll(deps.cluster, topic, 0, ISOLATION.READ_COMMITTED);
  assert.deepEqual(
    read.map((x) => [x.key?.toString(), x.value?.toString()]),
    events.map((e) => [String(e.id), JSON.stringify(e)]),
  );
  const bad = join(tmp, `${name}-bad.jsonl`);
  writeFileSync(bad, '{"id":"c"}\n{"id":"d"}\n{"id": oops}\n{"id":"e"}\n');
  r = await cli('produce', topic, '--file', bad, '--key', 'id');
  assert.equal(r.code, 2);
  assert.match(r.err, new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is invalid:\\n  - line 3: not JSON`));
  writeFileSync(bad, '{"id":"c"}\n{"other":"d"}\n');
  r = await cli('produce', topic, '--file', bad, '--key', 'id');
  assert.equal(r.code, 2);
  assert.match(r.err, /line 2: --key id: the field is missing/);
  assert.equal(
    await latestOffset(deps.cluster, topic, 0, ISOLATION.READ_COMMITTED),
    3,
    'nothing of a bad file was produced',
  );
  r = await cli('produce', `${name}.nope`, '--file', good);
  assert.equal(r.code, 1);
  assert.match(r.err, /topic '.*\.nope' does not exist; create it first/);
});

test("a wrong broker: one clear line on the terminal, the Kafka client's detail in the log file", () => {
  const name = uniqueName('broker');
  const log = join(tmp, `${name}.log`);
  const r = spawnSync(
    process.execPath,
    [
      BIN,
      'run',
      configFile(name, { connections: { kafka: { brokers: ['127.0.0.1:1'] } } }),
      '--transforms',
      TRANSFORMS,
      '--log-file',
      log,
    ],
    { encoding: 'utf8', env: process.env, timeout: 60_000 },
  );
  assert.equal(r.status, 1, `${r.stdout}${r.stderr}`);
  const lines = `${r.stdout}${r.stderr}`.trim().split('\n');
  assert.equal(lines.length, 1, `the terminal got:\n${lines.join('\n')}`);
  assert.match(lines[0]!, /^onceflow run: cannot reach Kafka at 127\.0\.0\.1:1 \(/);
  assert.match(
    readFileSync(log, 'utf8'),
    /\[ERROR\] kafkajs: \[Connection\] Connection error: connect ECONNREFUSED 127\.0\.0\.1:1/,
  );
});

test("--log-file holds the worker's info lines and its shutdown; the terminal does not get the info lines", async () => {
  const name = uniqueName('logfile');
  const log = join(tmp, `${name}.log`);
  const w = spawn(
    process.execPath,
    [BIN, 'worker', '--transforms', TRANSFORMS, '--task-queue', name, '--log-file', log],
    {
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let err = '';
  w.stderr!.on('data', (d: Buffer) => void (err += d.toString()));
  const exited = new Promise<number | null>((r) => w.once('exit', (code) => r(code)));
  for (const until = Date.now() + 60_000; !/onceflow worker on task queue/.test(err);) {
    if (w.exitCode !== null || Date.now() > until) assert.fail(`the worker did not start:\n${err}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  w.kill('SIGTERM');
  assert.equal(await exited, 0, err);
  const text = readFileSync(log, 'utf8');
  assert.match(text, /\[INFO\] temporal: /, "the Temporal worker's info lines");
  assert.match(text, /\[INFO\] onceflow: onceflow worker on task queue/);
  assert.match(text, /\[INFO\] onceflow: onceflow worker: SIGTERM, stopping/);
  assert.match(text, /\[INFO\] onceflow: onceflow worker stopped/);
  assert.doesNotMatch(err, /\[INFO\] temporal/, 'the terminal does not get the info lines');
});

test('status after a failed setup shows why the partitions never started; start names --transforms; run prints the Web UI link', async () => {
  const name = uniqueName('setup');
  const file = configFile(name, { pipeline: { transform: 'not-registered' } });
  assert.equal((await cli('topics', 'create', file, '--partitions', '2')).code, 0);
  started.push(name);
  const run = spawnSync(process.execPath, [BIN, 'run', file, '--transforms', TRANSFORMS, '--drain'], {
    encoding: 'utf8',
    env: process.env,
    timeout: 120_000,
  });
  assert.equal(run.status, 1, `${run.stdout}${run.stderr}`);
  assert.match(
    run.stderr,
    new RegExp(
      `Web UI: http://\\S+/workflows/${encodeURIComponent(pipelineWorkflowId(name)).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`,
    ),
  );
  const r = await cli('status', name, '--json');
  assert.equal(r.code, 0, r.err);
  const status = JSON.parse(r.out) as {
    problem: string | null;
    partitions: { phase: string; lastError: string | null }[];
  };
  assert.match(status.problem ?? '', /the pipeline workflow failed: .*not-registered/);
  assert.equal(status.partitions.length, 2);
  for (const p of status.partitions) {
    assert.equal(p.phase, 'not started');
    assert.match(p.lastError ?? '', /not-registered/);
  }
  const human = await cli('status', name);
  assert.match(human.out, /the pipeline workflow failed: .*not-registered/);
  const other = uniqueName('start');
  const startFile = configFile(other);
  assert.equal((await cli('topics', 'create', startFile)).code, 0);
  started.push(other);
  const s = await cli('start', startFile, '--detach', '--transforms', TRANSFORMS);
  assert.equal(s.code, 0, s.err);
  assert.ok(s.out.includes(`workers: onceflow worker --task-queue ${other} --transforms ${TRANSFORMS}`), s.out);
});
