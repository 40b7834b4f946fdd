/**
 * The secured stack (scripts/services.sh up --secure): Kafka with a SASL_SSL listener (SCRAM-SHA-512)
 * and ACLs, MariaDB with require_secure_transport and a REQUIRE SSL user, a Temporal server with
 * mutual TLS. The pipeline runs as User:onceflow with only its pipeline's ACLs; test set-up (topics,
 * input, verification) uses the Kafka admin. Then the negative cases — a wrong password, an
 * untrusted CA, a principal without the transactional-id ACL, plaintext to a TLS-only MySQL — each
 * end in an error naming the cause and nothing written; and a scan of everything the runs left
 * (histories, memos, worker logs, CLI and script output) for every secret in use.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { RowDataPacket } from 'mysql2';
import { loadSettings, onceflowHome, parseEnvFile } from '../src/config';
import { openConnections } from '../src/connections';
import { ISOLATION, latestOffset } from '../src/kafka/internals';
import { recoverXids } from '../src/mysql/branch';
import { partitionGtridPrefix } from '../src/mysql/xid';
import { partitionWorkflowId, pipelineWorkflowId } from '../src/spec';
import { failureOf } from '../src/workflows/partition';
import { assertFired, faultLine, spawnWorker, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify, type Scenario } from './support/pipeline';

const ROOT = join(__dirname, '..');
const RUN = process.env.ONCEFLOW_SECURE_RUN_DIR || join(onceflowHome(), 'run-secure');
const PIPELINE_ENV = join(RUN, 'services.env');
const ADMIN_ENV = join(RUN, 'admin.env');
const run = promisify(execFile);

/** Everything the runs printed or recorded, for the secrets scan at the end. */
const seen: { what: string; text: string }[] = [];
let admin: Deps;
const envWith = (file: string, extra: Record<string, string> = {}) => ({
  ...process.env,
  ONCEFLOW_SERVICES_ENV: file,
  ...extra,
});
const pipelineEnv = (extra: Record<string, string> = {}) => envWith(PIPELINE_ENV, extra);

async function services(...args: string[]): Promise<void> {
  // The secured stack's own run directory and port base, whatever stack the other tests use.
  const env = {
    ...process.env,
    ONCEFLOW_RUN_DIR: RUN,
    ONCEFLOW_PORT_BASE: process.env.ONCEFLOW_SECURE_PORT_BASE || '27000',
  };
  const r = await run('bash', [join(ROOT, 'scripts', 'services.sh'), ...args, '--secure'], {
    cwd: ROOT,
    env,
    maxBuffer: 64 << 20,
    timeout: 1_500_000,
  });
  seen.push({ what: `services.sh ${args.join(' ')}`, text: r.stdout + r.stderr });
}

/** Runs the onceflow CLI (the built package) with the given environment. */
async function cli(env: NodeJS.ProcessEnv, ...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const r = await run(process.execPath, [join(ROOT, 'bin', 'onceflow.js'), ...args], {
    cwd: ROOT,
    env,
    timeout: 120_000,
  }).then(
    (x) => ({ code: 0, out: x.stdout, err: x.stderr }),
    (e: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof e.code === 'number' ? e.code : 1,
      out: e.stdout ?? '',
      err: e.stderr ?? '',
    }),
  );
  seen.push({ what: `onceflow ${args.join(' ')}`, text: r.out + r.err });
  return r;
}

before(async () => {
  await services('up');
  admin = await openConnections(loadSettings(envWith(ADMIN_ENV)), 'onceflow-secure-test');
});

after(async () => admin?.close());

/** A fresh compare pipeline on the secured stack, its input produced by the admin, its ACLs granted to `principal`. */
async function scenario(prefix: string, principal: 'onceflow' | 'onceflow-nottx'): Promise<Scenario> {
  const s = await prepareScenario(admin, {
    prefix,
    records: 400,
    partitions: 2,
    epoch: { maxRecords: 50, maxWaitMs: 300 },
  });
  await services(
    'grant',
    s.spec.name,
    s.spec.source.topic,
    s.spec.kafkaSink.topic,
    '--principal',
    principal,
    ...(principal === 'onceflow' ? [] : ['--no-txn']),
  );
  return s;
}

/** `p`, or a failure naming the step that did not finish within `ms` (a hang says where it is). */
async function within<T>(what: string, ms: number, p: Promise<T>, more: () => string = () => ''): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not finish within ${ms / 1000} s${more() ? `\n${more()}` : ''}`)),
      ms,
    );
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

function watched(w: ReturnType<typeof spawnWorker>, what: string) {
  void w.exited.then(() => seen.push({ what, text: w.fullStderr }));
  return w;
}

test('onceflow config on the secured stack: every connection checked over TLS (Temporal mTLS, Kafka SASL_SSL, MySQL TLS), secrets redacted', async () => {
  const r = await cli(pipelineEnv(), 'config', '--json');
  assert.equal(r.code, 0, r.out + r.err);
  const report = JSON.parse(r.out) as {
    settings: { kafka: { sasl: { password: string } }; temporal: { tls: { clientCertPair: { key: string } } } };
    checks: { service: string; ok: boolean }[];
  };
  assert.deepEqual(
    report.checks.map((c) => [c.service, c.ok]),
    [
      ['temporal', true],
      ['kafka', true],
      ['mysql', true],
    ],
  );
  assert.equal(report.settings.kafka.sasl.password, '(set, redacted)');
  assert.equal(report.settings.temporal.tls.clientCertPair.key, '(set, redacted)');
});

test(
  'the pipeline as User:onceflow with only its ACLs, a worker SIGKILLed between prepare and commit and a second one recovering: exactly once',
  { timeout: 300_000 },
  async () => {
    const s = await scenario('sec', 'onceflow');
    const doomed = watched(
      spawnWorker(s.taskQueue, {
        ONCEFLOW_SERVICES_ENV: PIPELINE_ENV,
        ONCEFLOW_FAULTS: 'commit.before@epoch=1@partition=0:crash',
      }),
      'worker (killed)',
    );
    const handle = await start(admin, s);
    assert.equal(
      await within('the first worker', 90_000, doomed.exited, () => doomed.stderrText),
      -1,
      `the first worker died of SIGKILL at commit.before; its stderr:\n${doomed.stderrText}`,
    );
    assertFired(doomed.faultLines, faultLine('SIGKILL', 'commit.before@epoch=1@partition=0'), 'the first worker');
    const second = watched(spawnWorker(s.taskQueue, { ONCEFLOW_SERVICES_ENV: PIPELINE_ENV }), 'worker (recovering)');
    try {
      await within('the drain on the second worker', 120_000, drainAndWait(admin, s, handle), () =>
        second.stderrText.slice(-3000),
      );
      const report = await within('verify', 60_000, verify(admin, s));
      assert.ok(report.ok, failedChecks(report));
    } finally {
      second.kill('SIGTERM');
      await within('the second worker stopping on SIGTERM', 60_000, second.exited, () =>
        second.stderrText.slice(-3000),
      );
    }
    const status = await within('onceflow status', 60_000, cli(pipelineEnv(), 'status', s.spec.name));
    assert.equal(status.code, 0, status.err);
    for (const id of [
      pipelineWorkflowId(s.spec.name),
      partitionWorkflowId(s.spec.name, 0),
      partitionWorkflowId(s.spec.name, 1),
    ]) {
      const h = admin.client.workflow.getHandle(id);
      seen.push({
        what: `history of ${id}`,
        text: decodedHistory(JSON.stringify(historyToJSON(await within(`history of ${id}`, 30_000, h.fetchHistory())))),
      });
      seen.push({
        what: `memo of ${id}`,
        text: JSON.stringify((await within(`describe ${id}`, 30_000, h.describe())).memo ?? {}),
      });
    }
  },
);

/** A worker started with `env` stops at once with an error matching `message`, having written nothing. */
async function refusedWorker(env: Record<string, string>, message: RegExp): Promise<void> {
  const w = watched(spawnWorker('secure-refused', { ONCEFLOW_SERVICES_ENV: PIPELINE_ENV, ...env }), 'worker (refused)');
  const timer = setTimeout(() => w.kill('SIGKILL'), 60_000);
  const code = await w.exited;
  clearTimeout(timer);
  assert.equal(code, 1, `the worker exits with an error (not killed after 60 s); stderr:\n${w.stderrText}`);
  assert.match(w.stderrText, message);
}

test('a wrong Kafka password or an untrusted CA stops the worker at start with the cause named; onceflow config names each', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'onceflow-secure-'));
  const wrong = join(dir, 'wrong.password');
  writeFileSync(wrong, 'not-the-password-8517\n');
  const otherCa = join(RUN, 'certs', 'other-ca.crt');
  await refusedWorker({ ONCEFLOW_KAFKA_SASL_PASSWORD_FILE: wrong }, /cannot reach Kafka .*refused the SASL login/);
  await refusedWorker(
    { ONCEFLOW_KAFKA_SSL_CA_FILE: otherCa },
    /cannot reach Kafka .*not signed by a CA this client trusts.*ONCEFLOW_KAFKA_SSL_CA_FILE/,
  );
  await refusedWorker(
    { ONCEFLOW_MYSQL_SSL_CA_FILE: otherCa },
    /cannot reach MySQL .*not signed by a CA this client trusts.*ONCEFLOW_MYSQL_SSL_CA_FILE/,
  );
  await refusedWorker({ ONCEFLOW_TEMPORAL_TLS_CA_FILE: otherCa }, /cannot reach Temporal .*ONCEFLOW_TEMPORAL_TLS/);
  const checks = async (extra: Record<string, string>) => {
    const r = await cli(pipelineEnv(extra), 'config', '--json');
    assert.equal(r.code, 1, r.out + r.err);
    return new Map(
      (JSON.parse(r.out) as { checks: { service: string; ok: boolean; detail: string }[] }).checks.map((c) => [
        c.service,
        c,
      ]),
    );
  };
  let c = await checks({
    ONCEFLOW_KAFKA_SASL_PASSWORD_FILE: wrong,
    ONCEFLOW_TEMPORAL_TLS_SERVER_NAME: 'wrong.example',
    ONCEFLOW_MYSQL_SSL: 'false',
    ONCEFLOW_MYSQL_SSL_CA_FILE: '',
  });
  assert.match(c.get('kafka')!.detail, /refused the SASL login .*ONCEFLOW_KAFKA_SASL_USERNAME/);
  assert.match(c.get('temporal')!.detail, /does not name the host .*ONCEFLOW_TEMPORAL_TLS_SERVER_NAME/);
  assert.match(
    c.get('mysql')!.detail,
    /the account requires TLS \(REQUIRE SSL\) and TLS is off here: set ONCEFLOW_MYSQL_SSL=true/,
  );
  c = await checks({
    ONCEFLOW_KAFKA_SSL_CA_FILE: otherCa,
    ONCEFLOW_TEMPORAL_TLS_CERT_FILE: '',
    ONCEFLOW_TEMPORAL_TLS_KEY_FILE: '',
  });
  assert.match(c.get('kafka')!.detail, /not signed by a CA this client trusts/);
  assert.match(c.get('temporal')!.detail, /refused this client's certificate .*ONCEFLOW_TEMPORAL_TLS_CERT_FILE/);
  assert.ok(c.get('mysql')!.ok);
});

test(
  'a principal without the transactional-id ACL: the partitions end with NotAuthorized naming the grant, and nothing is written',
  { timeout: 180_000 },
  async () => {
    const s = await scenario('secnotx', 'onceflow-nottx');
    const nottx = parseEnvFile(readFileSync(ADMIN_ENV, 'utf8'));
    const w = watched(
      spawnWorker(s.taskQueue, {
        ONCEFLOW_SERVICES_ENV: PIPELINE_ENV,
        ONCEFLOW_KAFKA_SASL_USERNAME: nottx.ONCEFLOW_SECURE_NOTTX_USERNAME!,
        ONCEFLOW_KAFKA_SASL_PASSWORD_FILE: nottx.ONCEFLOW_SECURE_NOTTX_PASSWORD_FILE!,
      }),
      'worker (no transactional-id ACL)',
    );
    try {
      const handle = await start(admin, s);
      const outcome = await handle.result().then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(outcome, 'the pipeline fails');
      const { error, errorType } = failureOf(outcome);
      assert.equal(errorType, 'NotAuthorized', error);
      assert.match(
        error,
        /Kafka refused: TRANSACTIONAL_ID_AUTHORIZATION_FAILED .*grant Write and Describe on the pipeline's transactional ids/,
      );
    } finally {
      w.kill('SIGTERM');
      await w.exited;
    }
    // Nothing written: the output topic's log is empty (not even aborted records), no table rows, no XA branch.
    for (let p = 0; p < s.partitions; p++) {
      // A topic never created holds nothing either; any other error is the test's failure.
      const end = await latestOffset(admin.cluster, s.spec.kafkaSink.topic, p, ISOLATION.READ_UNCOMMITTED).catch(
        (e: { type?: string }) => {
          if (e?.type === 'UNKNOWN_TOPIC_OR_PARTITION') return 0;
          throw e;
        },
      );
      assert.equal(end, 0, `output partition ${p} holds nothing`);
      assert.deepEqual(
        await recoverXids(admin.pool, partitionGtridPrefix(s.spec.name, p)),
        [],
        `no XA branch of partition ${p}`,
      );
    }
    const table = s.spec.mysqlSink.tables[0]!.name;
    const [rows] = await admin.pool.query<RowDataPacket[]>(
      'SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
      [table],
    );
    if (Number(rows[0]!.n) > 0) {
      const [count] = await admin.pool.query<RowDataPacket[]>(`SELECT COUNT(*) AS n FROM \`${table}\``);
      assert.equal(Number(count[0]!.n), 0, 'the table holds no row');
    }
  },
);

/** History JSON with every payload decoded (payloads are base64 in it). */
const decodedHistory = (json: string) =>
  `${json}\n${[...json.matchAll(/"data":\s*"([A-Za-z0-9+/=]*)"/g)].map((m) => Buffer.from(m[1]!, 'base64').toString('utf8')).join('\n')}`;

test('no secret in use appears in any history, memo, worker log, CLI or script output of these runs', () => {
  const secrets = new Map<string, string>();
  for (const f of readdirSync(join(RUN, 'secrets')).filter((f) => f.endsWith('.password')))
    secrets.set(f, readFileSync(join(RUN, 'secrets', f), 'utf8').trim());
  // The private keys: any line of their base64 body.
  for (const k of ['client.key', 'server.key', 'ca.key']) {
    const body = readFileSync(join(RUN, 'certs', k), 'utf8')
      .split('\n')
      .filter((l) => l && !l.startsWith('-----'));
    body.forEach((line, i) => secrets.set(`${k} line ${i + 1}`, line));
  }
  assert.ok(
    secrets.size >= 5 && [...secrets.values()].every((v) => v.length >= 12),
    'the secrets to look for were read',
  );
  const find = (text: string) => [...secrets].filter(([, v]) => text.includes(v)).map(([k]) => k);
  // The scan itself finds a secret where there is one.
  assert.deepEqual(find(`x ${secrets.get('kafka-onceflow.password')} y`), ['kafka-onceflow.password']);
  const kinds = new Set(seen.map((s) => s.what.split(' ')[0]));
  for (const k of ['services.sh', 'onceflow', 'worker', 'history', 'memo'])
    assert.ok(kinds.has(k), `the scan covers ${k} output (${[...kinds].join(', ')})`);
  const leaks = seen.flatMap((s) => find(s.text).map((k) => `${k} in ${s.what}`));
  assert.deepEqual(leaks, []);
});
