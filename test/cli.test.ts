/**
 * The onceflow command, driven against a running pipeline on the real services: start from a
 * config file (idempotent), status, pause/resume with validated updates, metrics, transactions
 * (list and resolve real in-doubt ones), stop --drain --wait, verify, export-history, replay;
 * bad config and bad arguments; credentials never in history or memo.
 *
 * One pipeline (and one `onceflow worker` process, spawned in before()) is shared by the
 * command tests, which run in order, one command each, and build on each other's state: once a
 * step fails, the steps after it are skipped, so the first failure is the one reported.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { stringify } from 'yaml';
import { ISOLATION, PreparedTransaction, latestOffset } from '../src/kafka/internals';
import { epochGtrid, xidSql, xidToString } from '../src/mysql/xid';
import { makeEvents, produceValues, resetPipeline, compareSpec } from '../examples/flink-compare/scenario';
import { partitionWorkflowId, pipelineWorkflowId, transactionalId } from '../src/spec';
import { COMPARE_TABLE } from '../examples/flink-compare/transform';
import { openDeps, quietRuntime, uniqueName, waitUntil, type Deps } from './support/env';
import { cli } from './support/cli';

let deps: Deps;
const tmp = join(__dirname, '.tmp');
const name = uniqueName('cli');
const taskQueue = uniqueName('cli-tq');
let worker: ChildProcess;
let workerExited: Promise<unknown>;
let metricsPort = 0;
let configFile: string;
const TRANSFORMS = join(__dirname, '..', 'examples', 'flink-compare', 'transforms.ts');

const config = (over: Record<string, unknown> = {}) => ({
  pipeline: {
    name,
    source: { topic: `${name}.in` },
    transform: 'flink-compare',
    transformOptions: { table: `t_${name.replace(/[^a-z0-9]/g, '_')}` },
    kafkaSink: { topic: `${name}.out` },
    mysqlSink: { tables: [{ ...COMPARE_TABLE, name: `t_${name.replace(/[^a-z0-9]/g, '_')}` }] },
    epoch: { maxRecords: 50, maxWaitMs: 300 },
  },
  taskQueue,
  connections: { mysql: { password: deps.settings.mysql.password } },
  ...over,
});

before(async () => {
  quietRuntime();
  deps = await openDeps();
  mkdirSync(tmp, { recursive: true });
  configFile = join(tmp, `${name}.yaml`);
  writeFileSync(configFile, stringify(config()));
  const spec = compareSpec({
    name,
    source: { topic: `${name}.in` },
    kafkaSink: { topic: `${name}.out` },
    transformOptions: { table: `t_${name.replace(/[^a-z0-9]/g, '_')}` },
  });
  await resetPipeline(deps.admin, deps.pool, spec, 2);
  const { values } = makeEvents(600, 11);
  await produceValues(deps.settings.kafka, spec.source.topic, 2, values);
  // The worker is the CLI's own `onceflow worker` process, with a Prometheus endpoint on a free port.
  worker = spawn(
    process.execPath,
    [
      join(__dirname, '..', 'bin', 'onceflow.js'),
      'worker',
      '--transforms',
      TRANSFORMS,
      '--task-queue',
      taskQueue,
      '--metrics-port',
      '0',
    ],
    {
      env: process.env,
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  workerExited = new Promise((r) => worker.once('exit', r));
  let stderr = '';
  metricsPort = await new Promise<number>((resolve, reject) => {
    worker.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
      const m = /metrics at http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(stderr);
      if (m) resolve(Number(m[1]));
    });
    worker.once('exit', (code) => reject(new Error(`onceflow worker exited (${code}): ${stderr}`)));
  });
});

after(async () => {
  worker.kill('SIGTERM');
  await workerExited;
  // A step that failed may leave the pipeline running (its partitions polling forever): end it.
  if (failedStep) {
    for (const id of [pipelineWorkflowId(name), partitionWorkflowId(name, 0), partitionWorkflowId(name, 1)]) {
      await deps.client.workflow
        .getHandle(id)
        .terminate(`cli.test.ts: '${failedStep}' failed`)
        .catch(() => undefined);
    }
  }
  await deps.close();
});

test('bad config is rejected naming the field and the fix; bad arguments name what is wrong', async () => {
  const bad = join(tmp, `${name}-bad.yaml`);
  writeFileSync(
    bad,
    stringify({ ...config(), pipeline: { ...config().pipeline, epochs: { maxRecords: 5 }, name: 'Not Valid' } }),
  );
  let r = await cli('start', bad);
  assert.equal(r.code, 2);
  assert.match(r.err, /pipeline\.epochs: is not a known field — did you mean 'epoch'\?/);
  writeFileSync(
    bad,
    stringify({
      ...config(),
      pipeline: {
        ...config().pipeline,
        name: 'Not Valid',
        kafkaSink: { topic: `${name}.out`, transactionTimeoutMs: 'long' },
      },
    }),
  );
  r = await cli('start', bad);
  assert.equal(r.code, 2);
  assert.match(r.err, /pipeline\.kafkaSink\.transactionTimeoutMs: must be an integer, got string "long"/);
  writeFileSync(bad, stringify({ ...config(), pipeline: { ...config().pipeline, name: 'Not Valid' } }));
  r = await cli('start', bad);
  assert.equal(r.code, 2);
  assert.match(r.err, /pipeline\.name: must match/);
  r = await cli('start', join(tmp, 'missing.yaml'));
  assert.equal(r.code, 2);
  assert.match(r.err, /cannot be read/);
  r = await cli('pause');
  assert.equal(r.code, 2);
  assert.match(r.err, /missing pipeline/);
  r = await cli('worker', '--metrics-port', 'abc');
  assert.equal(r.code, 2);
  assert.match(r.err, /--metrics-port must be a port number/);
  r = await cli('status', '--colour');
  assert.equal(r.code, 2);
  assert.match(r.err, /Unknown option '--colour'/);
});

test('an unreachable service is reported with its address', () => {
  const r = spawnSync(process.execPath, [join(__dirname, '..', 'bin', 'onceflow.js'), 'status'], {
    env: { ...process.env, ONCEFLOW_TEMPORAL_ADDRESS: '127.0.0.1:1' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /cannot reach Temporal at 127\.0\.0\.1:1/);
});

test('config: effective settings with the password redacted, each connection checked; a wrong password or namespace is named with what to do', () => {
  const config = (env: Record<string, string>) =>
    spawnSync(process.execPath, [join(__dirname, '..', 'bin', 'onceflow.js'), 'config', '--json'], {
      env: { ...process.env, ...env },
      encoding: 'utf8',
      timeout: 60_000,
    });
  const good = config({});
  assert.equal(good.status, 0, good.stderr);
  const report = JSON.parse(good.stdout) as {
    settings: { mysql: { password: string } };
    checks: { service: string; ok: boolean; detail: string }[];
  };
  assert.deepEqual(
    report.checks.map((c) => [c.service, c.ok]),
    [
      ['temporal', true],
      ['kafka', true],
      ['mysql', true],
    ],
  );
  assert.equal(report.settings.mysql.password, '(set, redacted)');
  assert.ok(!good.stdout.includes(deps.settings.mysql.password));
  const wrongPassword = 'not-the-password-4711';
  const bad = config({ ONCEFLOW_MYSQL_PASSWORD: wrongPassword, ONCEFLOW_TEMPORAL_NAMESPACE: 'no-such-namespace' });
  assert.equal(bad.status, 1);
  const checks = (JSON.parse(bad.stdout) as typeof report).checks;
  assert.match(
    checks.find((c) => c.service === 'mysql')!.detail,
    /wrong user or password for 'onceflow' — check ONCEFLOW_MYSQL_USER and ONCEFLOW_MYSQL_PASSWORD/,
  );
  assert.match(
    checks.find((c) => c.service === 'temporal')!.detail,
    /namespace 'no-such-namespace' does not exist there/,
  );
  assert.ok(checks.find((c) => c.service === 'kafka')!.ok);
  assert.ok(!`${bad.stdout}${bad.stderr}`.includes(wrongPassword), 'the password must not be printed');
});

/** One command of the shared pipeline's life, skipped once an earlier step failed. */
let failedStep: string | undefined;
function step(title: string, fn: () => Promise<void>, timeout = 120_000): void {
  test(title, { timeout }, async (t) => {
    if (failedStep) {
      t.skip(`the earlier step '${failedStep}' failed`);
      return;
    }
    try {
      await fn();
    } catch (e) {
      failedStep = title;
      throw e;
    }
  });
}

const statusRows = async <T>() => JSON.parse((await cli('status', name, '--json')).out).partitions as T[];
const historyFile = join(tmp, `${name}-p0.json`);
/** The prepared XA branch of a future epoch the test leaves in doubt (as `onceflow transactions` names it). */
const leftover = { gtrid: epochGtrid(name, 1, 900), bqual: 'cli' };
const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

step('start: from the config file, idempotent (a second start returns the running pipeline)', async () => {
  let r = await cli('start', configFile, '--json');
  assert.equal(r.code, 0, r.err);
  const started = JSON.parse(r.out) as { workflowId: string; runId: string };
  assert.equal(started.workflowId, pipelineWorkflowId(name));
  r = await cli('start', configFile, '--json');
  assert.equal(JSON.parse(r.out).runId, started.runId);
});

step('worker: the `onceflow worker` process runs the pipeline (an epoch committed on both partitions)', async () => {
  await waitUntil(
    'an epoch committed on both partitions',
    async () => {
      const rows = await statusRows<{ epoch: number | null }>();
      return rows.length === 2 && rows.every((p) => (p.epoch ?? 0) >= 1);
    },
    60_000,
    250,
  );
  // A healthy running pipeline: time since the last commit known, epochs in flight listed, not stalled.
  const rows = await statusRows<{
    partition: number;
    phase: string;
    sinceCommitSec: number | null;
    inFlight: string | null;
    attempt: number | null;
    stalled: boolean;
  }>();
  for (const r of rows) {
    assert.ok(
      typeof r.sinceCommitSec === 'number' && r.sinceCommitSec >= 0,
      `partition ${r.partition}: sinceCommitSec ${r.sinceCommitSec}`,
    );
    assert.equal(typeof r.inFlight, 'string', `partition ${r.partition}: inFlight`);
    assert.equal(r.stalled, false, `partition ${r.partition} is not stalled: ${JSON.stringify(r)}`);
  }
});

step('pause: both partitions pause; pausing again is refused as already paused', async () => {
  let r = await cli('pause', name);
  assert.equal(r.code, 0, r.out + r.err);
  await waitUntil(
    'both partitions paused',
    async () => (await statusRows<{ phase: string }>()).every((p) => p.phase === 'paused'),
    30_000,
    250,
  );
  r = await cli('pause', name);
  assert.equal(r.code, 1);
  assert.match(r.out, /already paused/);
});

step(
  'status: a table per partition (phase, epoch, committed, source-end, lag, since-commit, in-flight, retrying, stalled)',
  async () => {
    let r = await cli('status', name);
    assert.match(
      r.out,
      /partition\s+phase\s+epoch\s+committed\s+source-end\s+lag\s+since-commit\s+in-flight\s+retrying\s+stalled\s+last error/,
    );
    assert.doesNotMatch(r.out, /STALLED|no commit for/, 'a healthy pipeline shows no stall');
    // Paused partitions are never stalled, even with a threshold of 0 s.
    r = await cli('status', name, '--stalled-after', '0', '--json');
    assert.equal(r.code, 0, r.err);
    const status = JSON.parse(r.out) as {
      stalledAfterSec: number;
      partitions: { phase: string; sinceCommitSec: number | null; stalled: boolean }[];
    };
    assert.equal(status.stalledAfterSec, 0);
    assert.equal(status.partitions.length, 2);
    for (const p of status.partitions) {
      assert.equal(p.phase, 'paused');
      assert.ok(typeof p.sinceCommitSec === 'number' && p.sinceCommitSec >= 0);
      assert.equal(p.stalled, false);
    }
    r = await cli('status', name, '--stalled-after', 'soon');
    assert.equal(r.code, 2);
    assert.match(r.err, /--stalled-after must be a number of seconds/);
  },
);

step('transactions while running: an in-doubt XA branch is listed; resolving is refused', async () => {
  // In-doubt leftovers while paused: a prepared XA branch of a future epoch.
  const conn = await deps.pool.getConnection();
  const xid = xidSql(leftover);
  await conn.query(`XA START ${xid}`);
  await conn.query(`XA END ${xid}`);
  await conn.query(`XA PREPARE ${xid}`);
  conn.destroy();
  let r = await cli('transactions', name);
  assert.equal(r.code, 0);
  assert.match(
    r.out,
    new RegExp(
      `^partition 1 epoch 900: XA ${escapeRegExp(xidToString(leftover))}: would roll back \\(not the decided branch\\)$`,
      'm',
    ),
  );
  r = await cli('transactions', name, '--resolve');
  assert.equal(r.code, 1);
  assert.match(r.err, /is running .*stop it first/i);
});

step('resume', async () => {
  const r = await cli('resume', name);
  assert.equal(r.code, 0, r.out);
});

step("metrics: the worker's Prometheus endpoint counts records, epoch phases and lag", async () => {
  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const recordsLine = metrics.split('\n').find((l) => l.startsWith(`onceflow_records_total{pipeline="${name}"`));
  assert.ok(recordsLine && Number(recordsLine.split(' ').pop()) > 0, `records counter in:\n${metrics.slice(0, 800)}`);
  assert.match(
    metrics,
    /onceflow_epoch_phase_seconds_bucket\{(?=[^}]*pipeline="[^"]+")(?=[^}]*phase="prepare")(?=[^}]*le="0.1")[^}]*\} \d+/,
    'label order is not part of the format; prom-client puts le first',
  );
  assert.match(metrics, new RegExp(`onceflow_lag_records\\{pipeline="${name}",partition="0"\\} \\d+`));
  for (const p of [0, 1])
    assert.match(
      metrics,
      new RegExp(`^onceflow_seconds_since_last_commit\\{pipeline="${name}",partition="${p}"\\} \\d+(\\.\\d+)?$`, 'm'),
    );
});

step(
  'stop --drain --wait: drains every partition',
  async () => {
    const r = await cli('stop', name, '--drain', '--wait');
    assert.equal(r.code, 0, r.err);
    for (const p of [0, 1]) assert.match(r.out, new RegExp(`^partition ${p}: drained`, 'm'));
  },
  180_000,
);

step('transactions --resolve when stopped: rolls back the XA branch and a hanging Kafka transaction', async () => {
  // Stopped: a hanging Kafka transaction on one of the pipeline's transactional ids, plus the XA leftover.
  const hang = new PreparedTransaction(deps.cluster, transactionalId(name, 0, 1), 600_000);
  await hang.begin();
  await hang.send([{ topic: `${name}.out`, messages: [{ value: 'stray', partition: 0 }] }]);
  let r = await cli('transactions', name, '--json');
  const found = JSON.parse(r.out) as {
    partitions: { partition: number; epochs: { epoch: number; actions: { do: string; xid?: string }[] }[] }[];
    kafka: { topic: string }[];
  };
  const xa = found.partitions.flatMap((p) =>
    p.epochs.flatMap((e) =>
      e.actions
        .filter((a) => a.xid !== undefined)
        .map((a) => ({ partition: p.partition, epoch: e.epoch, do: a.do, xid: a.xid })),
    ),
  );
  assert.deepEqual(
    xa,
    [{ partition: 1, epoch: 900, do: 'rollback-branch', xid: xidToString(leftover) }],
    'the one XA leftover, to be rolled back',
  );
  assert.deepEqual(
    found.kafka.map((k) => k.topic),
    [`${name}.out`],
  );
  r = await cli('transactions', name, '--resolve');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /rolled-back/);
  await waitUntil(
    'the LSO to pass the aborted stray transaction',
    async () => {
      return (
        (await latestOffset(deps.cluster, `${name}.out`, 0, ISOLATION.READ_COMMITTED)) ===
        (await latestOffset(deps.cluster, `${name}.out`, 0, ISOLATION.READ_UNCOMMITTED))
      );
    },
    15_000,
  );
  r = await cli('transactions', name);
  assert.match(r.out, /nothing in doubt/);
});

step('verify --transforms: exactly once', async () => {
  const r = await cli('verify', name, '--transforms', TRANSFORMS);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /RESULT: exactly once/);
});

step('export-history: handles only, no credentials in history or memo', async () => {
  const file = historyFile;
  const r = await cli('export-history', partitionWorkflowId(name, 0), '--out', file);
  assert.equal(r.code, 0, r.err);
  // Credentials came from the config file and never entered history or memo.
  // Payloads are base64 in history JSON: decode every one before looking.
  const decoded = (json: string) =>
    [...json.matchAll(/"data":\s*"([A-Za-z0-9+/=]*)"/g)]
      .map((m) => Buffer.from(m[1]!, 'base64').toString('utf8'))
      .join('\n');
  const histories = [
    decoded(readFileSync(file, 'utf8')),
    decoded((await cli('export-history', pipelineWorkflowId(name))).out),
  ];
  assert.ok(
    histories[0]!.includes(`"transactionalId":"onceflow.${name}.0.`),
    'decoding works: the partition history shows transaction handles',
  );
  const memo = JSON.stringify((await deps.client.workflow.getHandle(pipelineWorkflowId(name)).describe()).memo);
  for (const text of [...histories, memo])
    assert.ok(!text.includes(deps.settings.mysql.password), 'the MySQL password is not in history or memo');
  assert.ok(
    histories[0]!.includes('markerOffset') && !histories[0]!.includes('"e-11-'),
    'history holds handles, not records',
  );
});

step('replay: the exported file and the workflow id both replay with the current code', async () => {
  let r = await cli('replay', historyFile);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /^ok/);
  r = await cli('replay', partitionWorkflowId(name, 0));
  assert.equal(r.code, 0, r.out);
});
