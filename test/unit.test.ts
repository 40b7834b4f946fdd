/** Pure unit tests: no services. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ASYNC_TRANSFORM_WINDOW, applyTransform, tableMap } from '../src/activities/apply';
import { parseEnvFile } from '../src/config';
import { ValidationError } from '../src/errors';
import { parseFaults } from '../src/faults';
import {
  COORDINATOR,
  coordinatorCache,
  decodeDescribeProducers,
  decodeListTransactions,
  decodeWriteTxnMarkers,
  describeProducersRequest,
  listTransactionsRequest,
  withoutAborted,
  writeTxnMarkersRequest,
} from '../src/kafka/internals';
import { createTableSql, upsertSql, quoteIdent } from '../src/mysql/sink';
import { mysqlMode, stageTableName } from '../src/mysql/stage';
import { decodeRows, encodeParts, type StagedRows } from '../src/mysql/stage-codec';
import { epochGtrid, parseGtrid, xidFromString, xidSql, xidToString } from '../src/mysql/xid';
import { applyControl, assertTransition, validateControl } from '../src/protocol';
import { compareSpec } from '../examples/flink-compare/scenario';
import { groupTransactionalId, parseGroupTransactionalId } from '../src/spec';
import { definePipeline } from '../src/schema/pipeline';
import { COMPARE_TABLE, compareTransform, parseEvent } from '../examples/flink-compare/transform';

const base = {
  name: 'p1',
  source: { topic: 'in' },
  transform: 'flink-compare',
  kafkaSink: { topic: 'out' },
  mysqlSink: { tables: [COMPARE_TABLE] },
};

test('definePipeline fills defaults', () => {
  const s = definePipeline(base);
  assert.equal(s.source.startFrom, 'earliest');
  assert.equal(s.kafkaSink.transactionalIdPool, 2);
  assert.equal(s.progressTopic, 'onceflow.progress.p1');
  assert.equal(s.deadLetterTopic, 'p1.dlq');
  assert.equal(s.mysqlSink.mode, 'staged');
  // A spec from a run started before the option existed (no staging tables were created) keeps writing directly.
  assert.equal(mysqlMode({ ...s, mysqlSink: { tables: s.mysqlSink.tables } }), 'direct');
  assert.equal(mysqlMode(s), 'staged');
});

test('definePipeline names every wrong field and the fix', () => {
  let err: unknown;
  try {
    definePipeline({
      ...base,
      name: 'Bad Name',
      kafkaSink: { topic: 'in', transactionalIdPool: 1 },
      mysqlSink: {
        tables: [{ ...COMPARE_TABLE, name: 'x; DROP TABLE y', onDuplicate: { kind: 'accumulate', columns: ['nope'] } }],
      },
      epoch: { maxRecords: 0 },
    });
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof ValidationError);
  const fields = err.problems.map((p) => p.field);
  for (const f of [
    'name',
    'kafkaSink.topic',
    'kafkaSink.transactionalIdPool',
    'mysqlSink.tables[0].name',
    'mysqlSink.tables[0].onDuplicate.columns[0]',
    'epoch.maxRecords',
  ]) {
    assert.ok(fields.includes(f), `expected a problem for ${f}, got ${fields.join(', ')}`);
  }
  assert.match(err.message, /kafkaSink\.topic: must differ from source\.topic/);
  assert.throws(
    () =>
      definePipeline({
        ...base,
        mysqlSink: {
          tables: [{ ...COMPARE_TABLE, columns: [...COMPARE_TABLE.columns, 'onceflow_seq'] }],
          mode: 'fast' as 'staged',
        },
      }),
    (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.match(e.message, /mysqlSink\.mode: must be 'staged' or 'direct', got "fast"/);
      assert.match(
        e.message,
        /mysqlSink\.tables\[0\]\.columns\[5\]: 'onceflow_seq': the prefix 'onceflow_' is reserved/,
      );
      return true;
    },
  );
  // A benchmark knob that was a setting: refused by name, as removed, whatever its value.
  for (const value of [false, true]) {
    assert.throws(
      () => definePipeline({ ...base, epoch: { maxWaitMs: 100, commitWithNextPrepare: value } as never }),
      (e: unknown) => {
        assert.ok(e instanceof ValidationError);
        assert.deepEqual(
          e.problems.map((p) => p.field),
          ['epoch.commitWithNextPrepare'],
        );
        assert.match(e.message, /epoch\.commitWithNextPrepare: was removed: .*Delete the field/);
        return true;
      },
    );
  }
  assert.throws(
    () => definePipeline({ ...base, epoch: { maxWait: 5 } as never }),
    /epoch\.maxWait: is not a known field — did you mean 'maxWaitMs'\? \(known: maxRecords, maxBytes, maxWaitMs\)$/m,
  );
  assert.throws(() => definePipeline({ ...base, parallelism: 0 }), /parallelism: must be an integer from 1 to 1024/);
  assert.equal(definePipeline({ ...base, parallelism: 4 }).parallelism, 4);
});

test('staging table names stay within the 64 characters MySQL allows and differ per table', () => {
  assert.equal(stageTableName('test_two_step_compare'), 'onceflow_stage_test_two_step_compare');
  const long = stageTableName('t'.repeat(60));
  const other = stageTableName(`${'t'.repeat(59)}u`);
  assert.ok(long.length <= 64 && other.length <= 64, `${long} / ${other}`);
  assert.notEqual(long, other);
  assert.equal(quoteIdent(long), `\`${long}\``);
});

const bodiesOf = (rows: StagedRows) => encodeParts(rows).map((p) => p.body);

test('staged rows: encoded and decoded to the same values of every SQL type, whole rows per body, tables in order', () => {
  const a: TableSpec = { name: 'a', columns: ['k', 'v'], onDuplicate: { kind: 'replace', columns: ['v'] } };
  const b: TableSpec = {
    name: 'b',
    columns: ['k', 'when', 'raw', 'big'],
    onDuplicate: { kind: 'replace', columns: ['when'] },
  };
  const rows: StagedRows = [
    [
      a,
      [
        ['x', 1.5],
        ['ü €\n"', null],
        ['', -0.25],
      ],
    ],
    [b, [['k', new Date(1_700_000_000_123), Buffer.from([0, 255, 7]), 2n ** 70n]]],
  ];
  const back = decodeRows(bodiesOf(rows), [b, a]);
  assert.deepEqual(back, rows);
  assert.ok(back[1]![1][0]![1] instanceof Date && Buffer.isBuffer(back[1]![1][0]![2]));
  assert.equal(typeof back[1]![1][0]![3], 'bigint');
  // Large epochs are cut into bodies of about 1 MiB, never inside a row; decoded they are one list
  // again, and each body holds the rows encodeParts gives with it (what the apply upserts per body).
  const many: StagedRows = [
    [a, Array.from({ length: 30_000 }, (_, i) => [`key-${i}`.padEnd(60, '.'), i])],
    [b, [['k', new Date(0), Buffer.from([1]), 1n]]],
  ];
  const parts = encodeParts(many);
  const bodies = parts.map((p) => p.body);
  assert.ok(bodies.length >= 2, `${bodies.length} bodies`);
  for (const x of bodies) assert.ok(x.length <= (1 << 20) + 200, `${x.length} bytes`);
  assert.deepEqual(decodeRows(bodies, [a, b]), many);
  for (const p of parts) assert.deepEqual(decodeRows([p.body], [a, b]), p.rows);
  assert.deepEqual(bodiesOf([]), []);
  assert.throws(() => decodeRows(bodiesOf(rows), [a]), /table 'b', which the pipeline definition no longer has/);
});

test('identifiers are validated before quoting; values never enter SQL text', () => {
  assert.equal(quoteIdent('test_two_step_compare'), '`test_two_step_compare`');
  assert.throws(() => quoteIdent('a`b'), /not a plain SQL identifier/);
  const maria = upsertSql(COMPARE_TABLE, 2, 'mariadb');
  assert.equal(
    maria,
    'INSERT INTO `test_two_step_compare` (`slot_time`, `key1`, `key2`, `key3`, `indicate`) VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE `indicate` = `indicate` + VALUES(`indicate`)',
  );
  const mysql8 = upsertSql(COMPARE_TABLE, 1, 'mysql');
  assert.match(
    mysql8,
    /VALUES \(\?, \?, \?, \?, \?\) AS new ON DUPLICATE KEY UPDATE `indicate` = `indicate` \+ new\.`indicate`$/,
  );
  assert.match(createTableSql(COMPARE_TABLE)!, /PRIMARY KEY \(`slot_time`, `key1`, `key2`, `key3`\)/);
});

test('a column type of create.columns describes its own column only, in the schema and where the SQL is built', () => {
  const withType = (indicate: string): TableSpec => ({
    ...COMPARE_TABLE,
    create: { ...COMPARE_TABLE.create!, columns: { ...COMPARE_TABLE.create!.columns, indicate } },
  });
  for (const ok of [
    'BIGINT UNSIGNED NOT NULL',
    'DECIMAL(12, 2)',
    'DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3)',
    'INT DEFAULT -1',
  ])
    assert.match(createTableSql(withType(ok))!, new RegExp(`\`indicate\` ${ok.replace(/[()]/g, '\\$&')}, `));
  const injected = [
    'BIGINT NOT NULL, extra BIGINT, INDEX (extra)', // a column, an index: accepted by the schema before
    'INT) SELECT user, password FROM secrets -- ', // CREATE … SELECT from a spec that skipped the schema
    "ENUM('a', 'b')",
    'INT; DROP TABLE t',
  ];
  for (const bad of injected) {
    // A spec from a workflow's history is not validated again: the SQL builder refuses it itself.
    assert.throws(
      () => createTableSql(withType(bad)),
      /create\.columns\.indicate of table 'test_two_step_compare'.*plain column type/,
    );
    assert.throws(
      () => definePipeline({ ...base, mysqlSink: { tables: [withType(bad)] } }),
      /mysqlSink\.tables\[0\]\.create\.columns\.indicate: must be a plain column type/,
    );
  }
});

test('xids: epoch in the gtrid, hex literals in SQL, round trip through history strings', () => {
  const x = { gtrid: epochGtrid('demo', 3, 17), bqual: 'a2.beef' };
  assert.deepEqual(parseGtrid(x.gtrid), { pipeline: 'demo', partition: 3, epoch: 17 });
  assert.deepEqual(xidFromString(xidToString(x)), x);
  assert.equal(
    xidSql(x),
    `X'${Buffer.from(x.gtrid).toString('hex')}', X'${Buffer.from('a2.beef').toString('hex')}', ${0x4f46}`,
  );
  assert.equal(parseGtrid("of:x'; DROP:1:2"), null);
});

test('fault rules parse and reject unknown conditions', () => {
  assert.deepEqual(parseFaults('commit.before@epoch=1@partition=0:crash, prepare.start:stall=50'), [
    { point: 'commit.before', epoch: 1, partition: 0, action: 'crash', ms: 0 },
    { point: 'prepare.start', action: 'stall', ms: 50 },
  ]);
  assert.deepEqual(parseFaults('commit.before@epoch=2:split=outputs'), [
    { point: 'commit.before', epoch: 2, action: 'split', ms: 0, commits: 'outputs' },
  ]);
  assert.throws(() => parseFaults('commit.before:split=half'), /split=markers or split=outputs/);
  assert.throws(
    () => parseFaults('commit.mysql-commited:crash'),
    /unknown point 'commit\.mysql-commited'.*commit\.mysql-committed/,
  );
  assert.throws(() => parseFaults('prepare.start:split=markers'), /commit.before only/);
  assert.throws(() => parseFaults('commit.before@color=red'), /unknown condition/);
  assert.throws(() => parseFaults('commit.before:explode'), /unknown action/);
});

test('control requests: validators reject what does not apply', () => {
  const c = { paused: false, drain: false, stop: false };
  assert.throws(() => validateControl('resume', c), /not paused/);
  assert.throws(() => validateControl('jump', c), /unknown control action/);
  const paused = applyControl(c, 'pause');
  assert.throws(() => validateControl('pause', paused), /already paused/);
  const draining = applyControl(paused, 'drain');
  assert.deepEqual(draining, { paused: false, drain: true, stop: false });
  assert.throws(() => validateControl('pause', draining), /already draining/);
});

test('phase transitions follow the table', () => {
  assertTransition('preparing', 'committing');
  assertTransition('committing', 'redoing');
  assert.throws(() => assertTransition('done', 'preparing'), /invalid phase transition/);
  assert.throws(() => assertTransition('reconciling', 'committing'), /invalid phase transition/);
});

test('env files parse KEY=VALUE, keep = inside values, skip comments', () => {
  assert.deepEqual(parseEnvFile('# c\nA=1\n\nB=x=y\n'), { A: '1', B: 'x=y' });
});

test('poison records and rows that do not fit the table go to the dead-letter list with their coordinates', async () => {
  const spec = compareSpec({ name: 'u', source: { topic: 'in' }, kafkaSink: { topic: 'out' } });
  const rec = (offset: number, value: string | null) => ({
    topic: 'in',
    partition: 2,
    offset,
    key: null,
    value: value === null ? null : Buffer.from(value),
    headers: {},
    timestamp: '0',
  });
  const good = JSON.stringify({ id: 'a', slot_time: 't', key1: 'k', key2: 'k', key3: 'k', indicate: 3 });
  const ctx = { pipeline: 'u', partition: 2, epoch: 5, attempt: 1, options: {} };
  const out = await applyTransform(
    spec,
    compareTransform,
    [rec(10, good), rec(11, '{oops'), rec(12, null)],
    ctx,
    tableMap(spec),
  );
  assert.equal(out.outputs.length, 1);
  assert.equal(out.outputs[0]!.partition, 2);
  assert.equal(out.rows.length, 1);
  assert.deepEqual(
    out.deadLetters.map((d) => d.headers?.['onceflow.source']),
    ['in/2/11', 'in/2/12'],
  );
  assert.match(String(out.deadLetters[0]!.headers?.['onceflow.error']), /not JSON/);
  const badRows = await applyTransform(
    spec,
    { map: () => ({ mysql: [{ table: 'nope', values: {} }] }) },
    [rec(13, good)],
    ctx,
    tableMap(spec),
  );
  assert.match(String(badRows.deadLetters[0]!.headers?.['onceflow.error']), /unknown table 'nope'/);
});

test('an async transform keeps source order across its window, and a rejected lookup dead-letters only its record', async () => {
  const spec = compareSpec({ name: 'u', source: { topic: 'in' }, kafkaSink: { topic: 'out' } });
  const rec = (offset: number) => ({
    topic: 'in',
    partition: 0,
    offset,
    key: null,
    value: Buffer.from(String(offset)),
    headers: {},
    timestamp: '0',
  });
  const ctx = { pipeline: 'u', partition: 0, epoch: 1, attempt: 1, options: {} };
  let inFlight = 0;
  let most = 0;
  const lookup = {
    async map(r: { offset: number }) {
      inFlight++;
      most = Math.max(most, inFlight);
      // Later records answer first: the results must still come out in offset order.
      await new Promise((res) => setTimeout(res, (200 - r.offset) % 7));
      inFlight--;
      if (r.offset === 99) throw new Error('lookup failed for 99');
      return { kafka: [{ value: `v${r.offset}` }] };
    },
  };
  const records = Array.from({ length: 200 }, (_, i) => rec(i));
  const out = await applyTransform(spec, lookup, records, ctx, tableMap(spec));
  assert.deepEqual(
    out.outputs.map((o) => o.value),
    records.filter((r) => r.offset !== 99).map((r) => `v${r.offset}`),
  );
  assert.deepEqual(
    out.deadLetters.map((d) => d.headers?.['onceflow.source']),
    ['in/0/99'],
  );
  assert.match(String(out.deadLetters[0]!.headers?.['onceflow.error']), /lookup failed for 99/);
  assert.equal(most, ASYNC_TRANSFORM_WINDOW);
});

test('compare events are validated field by field', () => {
  assert.throws(() => parseEvent(Buffer.from('{"id":"x"}')), /field 'slot_time'/);
  assert.throws(
    () => parseEvent(Buffer.from('{"id":"x","slot_time":"t","key1":"a","key2":"b","key3":"c","indicate":1.5}')),
    /'indicate' must be an integer/,
  );
});

// ---- Stalls: `onceflow status` and the worker's seconds-since-last-commit gauge ----
import { STALLED_AFTER_SEC, describeStall, isStalled } from '../src/cli/status';
import { WorkerMetrics } from '../src/metrics';

test('a partition is stalled when it has lag and no commit for longer than the threshold, or an activity is on attempt ≥ 5', () => {
  const healthy = { phase: 'committing', lag: 120, sinceCommitSec: 2, attempt: null };
  assert.equal(isStalled(healthy, STALLED_AFTER_SEC), false);
  assert.equal(isStalled({ ...healthy, sinceCommitSec: 61 }, 60), true);
  assert.equal(isStalled({ ...healthy, sinceCommitSec: 60 }, 60), false, 'more than the threshold, not equal');
  assert.equal(isStalled({ ...healthy, sinceCommitSec: 3600, lag: 0 }, 60), false, 'idle: nothing to commit');
  assert.equal(isStalled({ ...healthy, sinceCommitSec: 3600, lag: null }, 60), false);
  assert.equal(isStalled({ ...healthy, sinceCommitSec: null }, 60), false, 'unknown time');
  assert.equal(isStalled({ ...healthy, attempt: 4 }, 60), false);
  assert.equal(isStalled({ ...healthy, attempt: 5 }, 60), true, 'attempt ≥ 5 whatever the time');
  assert.equal(isStalled({ ...healthy, attempt: 5, lag: 0 }, 60), true);
  for (const phase of ['reconciling', 'preparing', 'redoing'])
    assert.equal(isStalled({ ...healthy, phase, sinceCommitSec: 61 }, 60), true, phase);
  for (const phase of ['paused', 'stopped', 'done', 'completed', 'terminated', 'not started']) {
    assert.equal(
      isStalled({ ...healthy, phase, sinceCommitSec: 3600, attempt: 9 }, 60),
      false,
      `${phase} is never stalled`,
    );
  }
  assert.equal(
    isStalled({ ...healthy, phase: 'no answer', sinceCommitSec: null }, 60),
    true,
    'no worker answers while records wait',
  );
  assert.equal(isStalled({ ...healthy, phase: 'no answer', sinceCommitSec: null, lag: 0 }, 60), false);
  assert.equal(
    describeStall({
      partition: 1,
      sinceCommitSec: 95,
      waitingOn: 'commitEpoch attempt 7',
      phase: 'committing',
      lastError: 'Lock wait timeout exceeded; try restarting transaction',
    }),
    'partition 1: no commit for 95s, waiting on commitEpoch attempt 7: Lock wait timeout exceeded; try restarting transaction',
  );
  assert.equal(
    describeStall({ partition: 0, sinceCommitSec: null, waitingOn: null, phase: 'reconciling', lastError: null }),
    'partition 0: no commit seen, waiting on phase reconciling',
  );
  assert.equal(
    describeStall({
      partition: 2,
      sinceCommitSec: null,
      waitingOn: 'prepareEpoch attempt 2',
      phase: 'no answer',
      lastError: 'activity Heartbeat timeout',
    }),
    'partition 2: no worker answers its status query, waiting on prepareEpoch attempt 2: activity Heartbeat timeout',
  );
});

test('onceflow_seconds_since_last_commit: per partition, at scrape time, a retried commit of the same epoch does not reset it', async () => {
  let now = 1_000_000;
  const m = new WorkerMetrics(() => now);
  const committed = (partition: number, epoch: number, side: 'kafka' | 'mysql') =>
    m.observe({ kind: 'committed', pipeline: 'p', partition, epoch, side, ms: 5, startedAt: now });
  const value = async (partition: number) => {
    const line = (await m.text())
      .split('\n')
      .find((l) => l.startsWith(`onceflow_seconds_since_last_commit{pipeline="p",partition="${partition}"}`));
    return line === undefined ? undefined : Number(line.split(' ').pop());
  };
  assert.match(await m.text(), /# TYPE onceflow_seconds_since_last_commit gauge/);
  assert.equal(await value(0), undefined, 'no series before a commit was seen');
  committed(0, 7, 'kafka');
  committed(0, 7, 'mysql');
  committed(1, 3, 'kafka');
  now += 2_500;
  assert.equal(await value(0), 2.5);
  // Epoch 8: the Kafka side commits on every attempt while the MySQL side keeps failing.
  committed(0, 8, 'kafka');
  now += 30_000;
  committed(0, 8, 'kafka');
  now += 40_000;
  assert.equal(await value(0), 70);
  assert.equal(await value(1), 72.5);
  committed(0, 9, 'kafka');
  assert.equal(await value(0), 0);
});

test('each WorkerMetrics has its own registry: two workers in one process count apart', async () => {
  const [a, b] = [new WorkerMetrics(), new WorkerMetrics()];
  a.observe({
    kind: 'split',
    pipeline: 'p',
    partition: 1,
    epoch: 4,
    split: { producerId: 1, producerEpoch: 0, committed: ['out-0'], aborted: ['out-1'] },
  });
  a.observe({
    kind: 'prepared',
    pipeline: 'p',
    partition: 1,
    epoch: 4,
    records: 3,
    deadLetters: 0,
    ms: 70,
    end: 3,
    lag: 9,
    startedAt: 0,
    split: { readMs: 0, initMs: 0, transformMs: 0, kafkaMs: 0, previousCommitWaitMs: 0, mysqlMs: 0, xaPrepareMs: 0 },
  });
  const text = await a.text();
  assert.match(text, /^# TYPE onceflow_kafka_splits_total counter$/m);
  assert.match(text, /^onceflow_kafka_splits_total\{pipeline="p",partition="1"\} 1$/m);
  assert.match(text, /^onceflow_lag_records\{pipeline="p",partition="1"\} 9$/m);
  assert.match(text, /^onceflow_epoch_phase_seconds_bucket\{le="0.05",pipeline="p",phase="prepare"\} 0$/m);
  assert.match(text, /^onceflow_epoch_phase_seconds_bucket\{le="0.1",pipeline="p",phase="prepare"\} 1$/m);
  assert.match(text, /^onceflow_epoch_phase_seconds_count\{pipeline="p",phase="prepare"\} 1$/m);
  const other = await b.text();
  assert.match(other, /^# TYPE onceflow_kafka_splits_total counter$/m);
  assert.doesNotMatch(other, /^onceflow_kafka_splits_total\{/m);
  assert.doesNotMatch(other, /^onceflow_records_total\{/m);
});

import { pollUntil } from '../src/poll';

test("pollUntil returns the first defined answer, waits between calls, and throws the caller's error at the deadline", async () => {
  let calls = 0;
  let waits = 0;
  const third = await pollUntil(() => (++calls === 3 ? false : undefined), {
    timeoutMs: 5_000,
    everyMs: 1,
    onWait: () => waits++,
    onTimeout: () => new Error('never'),
  });
  assert.deepEqual([third, calls, waits], [false, 3, 2], 'false is an answer; undefined is not');
  class Late extends Error {}
  calls = 0;
  const t0 = Date.now();
  await assert.rejects(
    pollUntil(() => void calls++, {
      timeoutMs: 40,
      everyMs: 10,
      onTimeout: () => new Late(`no answer after ${calls} calls`),
    }),
    (e: unknown) => e instanceof Late && /no answer after \d+ calls/.test(e.message),
  );
  assert.ok(Date.now() - t0 >= 40 && calls >= 2, `polled until the deadline: ${calls} calls in ${Date.now() - t0} ms`);
  await assert.rejects(
    pollUntil(() => Promise.reject(new Error('broken')), {
      timeoutMs: 5_000,
      everyMs: 1,
      onTimeout: () => new Error('never'),
    }),
    /broken/,
  );
});

import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initProject, projectName } from '../src/cli/init';
import { ProgressView, summarize } from '../src/cli/progress';
import { loadTransforms } from '../src/transforms/load';
import { orders, parseOrder } from '../examples/orders/transforms';
import { loadPipelineConfig } from '../src/pipeline-file';

test('onceflow init: a valid pipeline from the directory name, a scaffold whose config is valid, and no overwriting', () => {
  assert.equal(projectName('/x/My Project!'), 'my-project-');
  assert.equal(projectName('/x/__'), 'my-pipeline');
  const dir = join(mkdtempSync(join(tmpdir(), 'onceflow-init-')), 'Word Count');
  const { name, files } = initProject(dir, '^0.1.0');
  assert.equal(name, 'word-count');
  assert.deepEqual(files.sort(), [
    'README.md',
    'events.jsonl',
    'package.json',
    'pipeline.yaml',
    'src/transforms.ts',
    'test/transforms.test.ts',
  ]);
  // Independent of a running stack: no services file, a password from the environment.
  const cfg = loadPipelineConfig(join(dir, 'pipeline.yaml'), {
    ONCEFLOW_SERVICES_ENV: '/nonexistent/services.env',
    ONCEFLOW_MYSQL_PASSWORD: 'x',
  });
  assert.equal(cfg.spec.transform, 'words');
  assert.equal(cfg.spec.mysqlSink.tables[0]!.name, 'word_count_word_counts');
  assert.equal(JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).dependencies.onceflow, '^0.1.0');
  assert.throws(() => initProject(dir, '^0.1.0'), /not empty/);
});

test('--transforms: a JS name → transform map loads; a module without transforms or with a non-transform is refused by name', () => {
  const dir = mkdtempSync(join(tmpdir(), 'onceflow-transforms-'));
  writeFileSync(join(dir, 'ok.js'), 'exports.transforms = { a: { map: () => ({}) } };');
  writeFileSync(join(dir, 'none.js'), 'exports.other = 1;');
  writeFileSync(join(dir, 'bad.js'), 'exports.transforms = { a: { map: () => ({}) }, b: 42 };');
  assert.deepEqual(loadTransforms(join(dir, 'ok.js')).names(), ['a']);
  assert.throws(() => loadTransforms(join(dir, 'none.js')), /exports no 'transforms'/);
  assert.throws(() => loadTransforms(join(dir, 'bad.js')), /'b' is not a transform/);
  assert.throws(() => loadTransforms(join(dir, 'missing.js')), /does not exist/);
  assert.throws(
    () => loadTransforms(join(dir, 'ok.js')).get('zz', 'pipe'),
    /pipeline 'pipe' uses transform 'zz', which is not registered here \(registered: a\).*--transforms <module>/,
  );
});

test('the progress view counts each committed epoch once, and a warning is one line without its stack', () => {
  const lines: string[] = [];
  const p = new ProgressView((l) => lines.push(l));
  const split = {
    readMs: 0,
    initMs: 0,
    transformMs: 0,
    kafkaMs: 0,
    previousCommitWaitMs: 0,
    mysqlMs: 0,
    xaPrepareMs: 0,
  };
  const prepared = (epoch: number) => ({
    kind: 'prepared' as const,
    pipeline: 'p',
    partition: 0,
    epoch,
    records: 10,
    deadLetters: 1,
    ms: 1,
    end: 0,
    lag: 5,
    startedAt: 0,
    split,
  });
  p.observe(prepared(1));
  p.observe(prepared(1)); // prepared again after a failed attempt
  p.observe({ kind: 'committed', pipeline: 'p', partition: 0, epoch: 1, side: 'mysql', ms: 1, startedAt: 0 });
  p.observe({ kind: 'committed', pipeline: 'p', partition: 0, epoch: 1, side: 'mysql', ms: 1, startedAt: 0 }); // its commit activity retried
  p.observe(prepared(2)); // not committed yet
  p.observe({ kind: 'retry', pipeline: 'p', partition: 0, activity: 'prepareEpoch' });
  assert.match(p.line(), /epochs 1 {2}records 10 .* lag 5 {2}dead letters 1 {2}retries 1 {2}redos 0/);
  const err = new Error('injected fault at prepare.start\n    at x (y.ts:1:1)');
  assert.equal(
    summarize({
      level: 'WARN',
      message: 'Activity failed',
      meta: { activityType: 'prepareEpoch', attempt: 2, workflowId: 'onceflow/p/0', error: err },
    }),
    '  attempt failed: prepareEpoch attempt 2 of onceflow/p/0 — injected fault at prepare.start',
  );
});

test("the orders example: an enriched event in the customer's partition, both tables, and malformed orders rejected by field", async () => {
  const rec = (v: string) => ({
    topic: 'o',
    partition: 0,
    offset: 0,
    key: null,
    value: Buffer.from(v),
    headers: {},
    timestamp: '0',
  });
  const ctx = { pipeline: 'x', partition: 0, epoch: 1, attempt: 1, options: { outputPartitions: 3 } };
  const out = await orders.map(
    rec('{"id":"o1","customer":"c7","items":[{"sku":"a","qty":2,"price":4.5}],"status":"paid"}'),
    ctx,
  );
  assert.equal(out.kafka![0]!.key, 'c7');
  assert.deepEqual(JSON.parse(String(out.kafka![0]!.value)), {
    order: 'o1',
    customer: 'c7',
    tier: 'standard',
    status: 'paid',
    items: 1,
    totalCents: 900,
  });
  assert.equal(
    out.kafka![0]!.partition,
    (await orders.map(rec('{"id":"o2","customer":"c7","items":[{"sku":"b","qty":1,"price":1}]}'), ctx)).kafka![0]!
      .partition,
  );
  assert.deepEqual(
    out.mysql!.map((r) => r.table),
    ['orders_latest', 'customer_totals'],
  );
  assert.throws(() => parseOrder(rec('{"id":"o3","items":[]}')), /order o3: no 'customer'/);
  assert.throws(
    () => parseOrder(rec('{"id":"o4","customer":"c","items":[{"sku":"a","qty":1.5,"price":1}]}')),
    /items\[0\] needs a sku, a positive integer qty/,
  );
  assert.throws(() => parseOrder(rec('nope')), /not JSON/);
});

import { loadSettings } from '../src/config';
import { workflowUrl } from '../src/client';

test('the Web UI link comes from the configuration: ONCEFLOW_TEMPORAL_UI, else port 8233 on the Temporal address host; a config file may set either', () => {
  const env = { ONCEFLOW_SERVICES_ENV: '/nonexistent/services.env', ONCEFLOW_MYSQL_PASSWORD: 'x' };
  assert.equal(
    loadSettings({ ...env, ONCEFLOW_TEMPORAL_ADDRESS: 'temporal.internal:7233' }).temporal.webUi,
    'http://temporal.internal:8233',
  );
  const cloud = loadSettings({
    ...env,
    ONCEFLOW_TEMPORAL_ADDRESS: 'ns.acct.tmprl.cloud:7233',
    ONCEFLOW_TEMPORAL_NAMESPACE: 'ns.acct',
    ONCEFLOW_TEMPORAL_UI: 'https://cloud.temporal.io/',
  });
  assert.equal(workflowUrl(cloud, 'onceflow/p'), 'https://cloud.temporal.io/namespaces/ns.acct/workflows/onceflow%2Fp');
  const dir = mkdtempSync(join(tmpdir(), 'onceflow-ui-'));
  const file = join(dir, 'p.yaml');
  const pipeline =
    'pipeline: { name: p, source: { topic: a }, transform: t, kafkaSink: { topic: b }, mysqlSink: { tables: [] } }';
  writeFileSync(file, `${pipeline}\nconnections: { temporal: { address: 'tmp.example:7233' } }\n`);
  assert.equal(loadPipelineConfig(file, env).settings.temporal.webUi, 'http://tmp.example:8233');
  writeFileSync(
    file,
    `${pipeline}\nconnections: { temporal: { address: 'tmp.example:7233', webUi: 'https://ui.example/' } }\n`,
  );
  assert.equal(loadPipelineConfig(file, env).settings.temporal.webUi, 'https://ui.example');
});

import { redactedSettings } from '../src/cli/config-check';
import { kafkaClientConfig } from '../src/kafka/client-config';
import { kafkaLogCreator } from '../src/kafka/log';

test('secure settings: TLS files, SASL and API keys from the environment or *_FILE, each mistake named; a config file says the same; nothing secret is printed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'onceflow-tls-'));
  const pem = (name: string, body: string) => (
    writeFileSync(join(dir, name), `-----BEGIN ${body}-----\nAAAA\n-----END ${body}-----\n`),
    join(dir, name)
  );
  const ca = pem('ca.crt', 'CERTIFICATE');
  const crt = pem('client.crt', 'CERTIFICATE');
  const key = pem('client.key', 'PRIVATE KEY');
  writeFileSync(join(dir, 'kafka.password'), 'kafka-secret-1\n');
  writeFileSync(join(dir, 'api.key'), 'api-key-secret-2');
  const env = { ONCEFLOW_SERVICES_ENV: '/nonexistent/services.env', ONCEFLOW_MYSQL_PASSWORD: 'mysql-secret-3' };
  const secure = {
    ...env,
    ONCEFLOW_KAFKA_SSL_CA_FILE: ca,
    ONCEFLOW_KAFKA_SSL_SERVER_NAME: 'kafka.internal',
    ONCEFLOW_KAFKA_SASL_MECHANISM: 'SCRAM-SHA-512',
    ONCEFLOW_KAFKA_SASL_USERNAME: 'onceflow',
    ONCEFLOW_KAFKA_SASL_PASSWORD_FILE: join(dir, 'kafka.password'),
    ONCEFLOW_KAFKA_REPLICATION_FACTOR: '3',
    ONCEFLOW_MYSQL_SSL: 'true',
    ONCEFLOW_MYSQL_SSL_CA_FILE: ca,
    ONCEFLOW_TEMPORAL_TLS_CA_FILE: ca,
    ONCEFLOW_TEMPORAL_TLS_CERT_FILE: crt,
    ONCEFLOW_TEMPORAL_TLS_KEY_FILE: key,
    ONCEFLOW_TEMPORAL_API_KEY_FILE: join(dir, 'api.key'),
  };
  const s = loadSettings(secure);
  assert.deepEqual(kafkaClientConfig(s.kafka, 'c'), {
    brokers: ['127.0.0.1:9092'],
    clientId: 'c',
    logCreator: kafkaLogCreator,
    ssl: { ca: readFileSync(ca, 'utf8'), servername: 'kafka.internal', rejectUnauthorized: true },
    sasl: { mechanism: 'scram-sha-512', username: 'onceflow', password: 'kafka-secret-1' },
  });
  assert.equal(s.kafka.replicationFactor, 3);
  assert.deepEqual(s.mysql.ssl, { ca: readFileSync(ca, 'utf8'), minVersion: 'TLSv1.2', rejectUnauthorized: true });
  assert.equal(s.temporal.tls?.clientCertPair?.key.toString(), readFileSync(key, 'utf8'));
  assert.equal(s.temporal.apiKey, 'api-key-secret-2');
  const shown = JSON.stringify(redactedSettings(s));
  for (const secret of ['kafka-secret-1', 'api-key-secret-2', 'mysql-secret-3', 'PRIVATE KEY'])
    assert.ok(!shown.includes(secret), `${secret} is redacted`);
  // A combined key + certificate file (what `openssl pkcs12 -nodes` writes: text before the first
  // PEM block) given as both certificate and key: its key is not printed as the certificate.
  const combined = join(dir, 'combined.pem');
  writeFileSync(
    combined,
    `Bag Attributes\n    localKeyID: 01\n${readFileSync(key, 'utf8')}${readFileSync(crt, 'utf8')}`,
  );
  const both = { ...env, ONCEFLOW_KAFKA_SSL_CERT_FILE: combined, ONCEFLOW_KAFKA_SSL_KEY_FILE: combined };
  const shownBoth = JSON.stringify(
    redactedSettings(
      loadSettings({ ...both, ONCEFLOW_MYSQL_SSL_CERT_FILE: combined, ONCEFLOW_MYSQL_SSL_KEY_FILE: combined }),
    ),
  );
  for (const secret of ['PRIVATE KEY', 'Bag Attributes', 'AAAA'])
    assert.ok(!shownBoth.includes(secret), `${secret} is redacted`);
  // Plain settings stay plain: no TLS, no SASL, the broker's replication factor.
  const plain = loadSettings(env);
  assert.deepEqual(
    [plain.kafka.ssl, plain.kafka.sasl, plain.kafka.replicationFactor, plain.mysql.ssl, plain.temporal.tls],
    [undefined, undefined, -1, undefined, undefined],
  );
  // Each mistake names its setting and what to do.
  const bad: [Record<string, string>, RegExp][] = [
    [
      { ONCEFLOW_KAFKA_SASL_MECHANISM: 'scram' },
      /ONCEFLOW_KAFKA_SASL_MECHANISM must be one of plain, scram-sha-256, scram-sha-512, oauthbearer/,
    ],
    [{ ONCEFLOW_KAFKA_SASL_MECHANISM: 'plain' }, /ONCEFLOW_KAFKA_SASL_USERNAME is not set/],
    [
      { ONCEFLOW_KAFKA_SASL_MECHANISM: 'plain', ONCEFLOW_KAFKA_SASL_USERNAME: 'u' },
      /ONCEFLOW_KAFKA_SASL_PASSWORD is not set/,
    ],
    [{ ONCEFLOW_KAFKA_SASL_MECHANISM: 'oauthbearer' }, /needs a token provider/],
    [
      { ONCEFLOW_KAFKA_SSL_CA_FILE: join(dir, 'missing.crt') },
      /ONCEFLOW_KAFKA_SSL_CA_FILE names '.*missing\.crt', which cannot be read \(ENOENT\)/,
    ],
    [
      { ONCEFLOW_TEMPORAL_TLS_CERT_FILE: crt },
      /ONCEFLOW_TEMPORAL_TLS_KEY_FILE is not set, but ONCEFLOW_TEMPORAL_TLS_CERT_FILE is/,
    ],
    [
      { ONCEFLOW_MYSQL_SSL: 'false', ONCEFLOW_MYSQL_SSL_CA_FILE: ca },
      /ONCEFLOW_MYSQL_SSL is false, but ONCEFLOW_MYSQL_SSL_\* files are given/,
    ],
    [{ ONCEFLOW_MYSQL_SSL: 'yes please' }, /ONCEFLOW_MYSQL_SSL must be true or false/],
    [{ ONCEFLOW_MYSQL_SSL: 'true', ONCEFLOW_MYSQL_SSL_MIN_VERSION: 'TLSv1.1' }, /must be TLSv1.2 or TLSv1.3/],
    [
      { ONCEFLOW_MYSQL_PASSWORD_FILE: join(dir, 'kafka.password') },
      /ONCEFLOW_MYSQL_PASSWORD and ONCEFLOW_MYSQL_PASSWORD_FILE are both set/,
    ],
    [{ ONCEFLOW_TEMPORAL_TLS: 'false', ONCEFLOW_TEMPORAL_API_KEY: 'k' }, /API keys are only sent over TLS/],
    [{ ONCEFLOW_KAFKA_REPLICATION_FACTOR: '0' }, /ONCEFLOW_KAFKA_REPLICATION_FACTOR must be at least 1/],
    [
      { ONCEFLOW_KAFKA_SASL_MECHANISM: 'plain', ONCEFLOW_KAFKA_SASL_USERNAME: 'u', ONCEFLOW_KAFKA_SASL_PASSWORD: 'p' },
      /ONCEFLOW_KAFKA_SASL_MECHANISM is plain, which sends the password as it is, but TLS to Kafka is off: .*ONCEFLOW_KAFKA_SASL_PLAINTEXT=true/,
    ],
    [
      { ONCEFLOW_TEMPORAL_UI: 'https://admin:pw@ui.internal' },
      /ONCEFLOW_TEMPORAL_UI holds a user name or password .*give the URL without it/,
    ],
  ];
  for (const [extra, message] of bad)
    assert.throws(() => loadSettings({ ...env, ...extra }), message, JSON.stringify(extra));
  // PLAIN without TLS only when asked for (a SASL_PLAINTEXT listener).
  const plainText = {
    ...env,
    ONCEFLOW_KAFKA_SASL_MECHANISM: 'plain',
    ONCEFLOW_KAFKA_SASL_USERNAME: 'u',
    ONCEFLOW_KAFKA_SASL_PASSWORD: 'p',
    ONCEFLOW_KAFKA_SASL_PLAINTEXT: 'true',
  };
  assert.deepEqual(loadSettings(plainText).kafka.sasl, { mechanism: 'plain', username: 'u', password: 'p' });
  // A password given as a file in the environment hides the services file's password (the dev stack's).
  const services = join(dir, 'services.env');
  writeFileSync(services, 'ONCEFLOW_MYSQL_PASSWORD=dev-stack-password\n');
  assert.equal(
    loadSettings({ ONCEFLOW_SERVICES_ENV: services, ONCEFLOW_MYSQL_PASSWORD_FILE: join(dir, 'kafka.password') }).mysql
      .password,
    'kafka-secret-1',
  );
  // An OAUTHBEARER provider comes through the library API (its token over TLS).
  const provider = async () => ({ value: 'token' });
  assert.deepEqual(
    loadSettings(
      { ...env, ONCEFLOW_KAFKA_SASL_MECHANISM: 'oauthbearer', ONCEFLOW_KAFKA_SSL_CA_FILE: ca },
      { kafkaOAuthBearerProvider: provider },
    ).kafka.sasl,
    {
      mechanism: 'oauthbearer',
      oauthBearerProvider: provider,
    },
  );
  // The same settings from a config file: relative paths from the file's folder; a secret given in the file replaces the environment's.
  const file = join(dir, 'p.yaml');
  writeFileSync(
    file,
    `pipeline: { name: p, source: { topic: a }, transform: t, kafkaSink: { topic: b }, mysqlSink: { tables: [] } }
connections:
  kafka: { ssl: { caFile: ca.crt }, sasl: { mechanism: scram-sha-256, username: u, passwordFile: kafka.password }, replicationFactor: 2 }
  mysql: { ssl: { enabled: true, minVersion: TLSv1.3 }, passwordFile: kafka.password }
  temporal: { tls: { caFile: ca.crt, certFile: client.crt, keyFile: client.key, serverName: temporal.internal } }
`,
  );
  const f = loadPipelineConfig(file, env).settings;
  assert.deepEqual(f.kafka.sasl, { mechanism: 'scram-sha-256', username: 'u', password: 'kafka-secret-1' });
  assert.equal(f.kafka.ssl?.ca, readFileSync(ca, 'utf8'));
  assert.equal(f.kafka.replicationFactor, 2);
  assert.deepEqual(f.mysql.ssl, { minVersion: 'TLSv1.3', rejectUnauthorized: true });
  assert.equal(f.mysql.password, 'kafka-secret-1');
  assert.equal(f.temporal.tls?.serverNameOverride, 'temporal.internal');
  writeFileSync(
    file,
    `pipeline: { name: p, source: { topic: a }, transform: t, kafkaSink: { topic: b }, mysqlSink: { tables: [] } }\nconnections: { kafka: { sasl: { mechanism: kerberos } } }\n`,
  );
  assert.throws(() => loadPipelineConfig(file, env), /connections\.kafka\.sasl\.mechanism/);
});

test('a mistake in a config file never repeats a secret: values under connections, secret-named fields, JSON syntax errors; one source per secret; no secret in transformOptions', () => {
  const dir = mkdtempSync(join(tmpdir(), 'onceflow-cfg-'));
  const env = { ONCEFLOW_SERVICES_ENV: '/nonexistent/services.env', ONCEFLOW_MYSQL_PASSWORD: 'x' };
  const pipeline =
    'pipeline: { name: p, source: { topic: a }, transform: t, kafkaSink: { topic: b }, mysqlSink: { tables: [] } }';
  const refused = (name: string, text: string, says: RegExp, secret: string) => {
    const file = join(dir, name);
    writeFileSync(file, text);
    assert.throws(
      () => loadPipelineConfig(file, env),
      (e: Error) => {
        assert.match(e.message, says);
        assert.ok(!e.message.includes(secret), `${name}: ${e.message}`);
        return true;
      },
    );
  };
  refused(
    'a.yaml',
    `${pipeline}\nconnections: { mysql: { password: 83716254 } }\n`,
    /connections\.mysql\.password: must be a string, got integer \(the value is not shown\)/,
    '83716254',
  );
  refused(
    'b.yaml',
    `${pipeline}\nconnections: { mysql: "mysql://u:S3cretPw@db/x" }\n`,
    /connections\.mysql: must be an object, got string/,
    'S3cretPw',
  );
  refused(
    'c.yaml',
    `${pipeline}\nconnections: { mysql: { passwordEnv: "S3cretPw-literal" } }\n`,
    /passwordEnv: is not the name of an environment variable .*use mysql\.passwordFile/,
    'S3cretPw',
  );
  refused(
    'd.yaml',
    `${pipeline}\nconnections: { mysql: { password: S3cretPw, passwordFile: pw } }\n`,
    /connections\.mysql\.passwordFile: and connections\.mysql\.password both give ONCEFLOW_MYSQL_PASSWORD; keep one/,
    'S3cretPw',
  );
  refused(
    'e.json',
    '{\n  "pipeline": {},\n  "connections": { "mysql": { "password": hunter2-secret } }\n}\n',
    /is not valid JSON: Unexpected token at line 3, column 43/,
    'hunter2',
  );
  refused(
    'f.yaml',
    `${pipeline.replace('mysqlSink', 'transformOptions: { lookup: { apiToken: tok-123 } }, mysqlSink')}\n`,
    /pipeline\.transformOptions\.lookup\.apiToken: 'apiToken' looks like a secret, .*through the worker's environment/,
    'tok-123',
  );
  // Options that only sound alike pass.
  writeFileSync(
    join(dir, 'g.yaml'),
    `${pipeline.replace('mysqlSink', 'transformOptions: { tokenizer: ws, keyColumn: k, authorName: a }, mysqlSink')}\n`,
  );
  assert.deepEqual(loadPipelineConfig(join(dir, 'g.yaml'), env).spec.transformOptions, {
    tokenizer: 'ws',
    keyColumn: 'k',
    authorName: 'a',
  });
});

test('DescribeProducers v0: the request as the protocol lays it out (flexible: header tagged fields, compact arrays); the response decoded field by field', async () => {
  const body: Buffer = (await describeProducersRequest([{ topic: 'out', partitions: [0, 7] }]).encode()).buffer;
  // header tags | topics (1+1) | "out" (3+1) | partitions (2+1) | 0 | 7 | topic tags | request tags
  assert.deepEqual([...body], [0, 2, 4, ...Buffer.from('out'), 3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0]);
  const int = (n: number, bytes: number) => {
    const b = Buffer.alloc(bytes);
    if (bytes === 8) b.writeBigInt64BE(BigInt(n));
    else if (bytes === 4) b.writeInt32BE(n);
    else b.writeInt16BE(n);
    return [...b];
  };
  const response = Buffer.from([
    0,
    ...int(0, 4),
    2,
    4,
    ...Buffer.from('out'),
    3, // header tags, throttle, 1 topic "out", 2 partitions
    ...int(0, 4),
    ...int(0, 2),
    0,
    2,
    ...int(4001, 8),
    ...int(3, 4),
    ...int(41, 4),
    ...int(1700000000000, 8),
    ...int(5, 4),
    ...int(120, 8),
    0,
    0, // partition 0: one producer
    ...int(7, 4),
    ...int(6, 2),
    2,
    ...Buffer.from('x'),
    1,
    0, // partition 7: NOT_LEADER, message "x", no producers
    0,
    0,
  ]);
  assert.deepEqual(decodeDescribeProducers(response), [
    {
      topic: 'out',
      partition: 0,
      errorCode: 0,
      errorMessage: null,
      producers: [
        {
          producerId: 4001,
          producerEpoch: 3,
          lastSequence: 41,
          lastTimestamp: 1700000000000,
          coordinatorEpoch: 5,
          currentTxnStartOffset: 120,
        },
      ],
    },
    { topic: 'out', partition: 7, errorCode: 6, errorMessage: 'x', producers: [] },
  ]);
});

test("ListTransactions v0: the request as the protocol lays it out (flexible); the response decoded; only our pipeline's group ids parse", async () => {
  const body: Buffer = (await listTransactionsRequest(['Ongoing']).encode()).buffer;
  // header tags | state filters (1+1) | "Ongoing" (7+1) | producer id filters (0+1) | request tags
  assert.deepEqual([...body], [0, 2, 8, ...Buffer.from('Ongoing'), 1, 0]);
  const str = (x: string) => [x.length + 1, ...Buffer.from(x)];
  const i64 = (n: number) => {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(BigInt(n));
    return [...b];
  };
  const response = Buffer.from([
    0, // header tags
    ...[0, 0, 0, 0], // throttle
    ...[0, 0], // error code
    2,
    ...str('Bogus'), // unknown state filters
    3, // two transactions
    ...str('onceflow.p.g3.1'),
    ...i64(4001),
    ...str('Ongoing'),
    0,
    ...str('other'),
    ...i64(7),
    ...str('Ongoing'),
    0,
    0,
  ]);
  assert.deepEqual(decodeListTransactions(response), {
    errorCode: 0,
    transactions: [
      { transactionalId: 'onceflow.p.g3.1', producerId: 4001, state: 'Ongoing' },
      { transactionalId: 'other', producerId: 7, state: 'Ongoing' },
    ],
  });
  assert.deepEqual(parseGroupTransactionalId('p', 'onceflow.p.g3.1'), { group: 3, slot: 1 });
  for (const id of [
    'onceflow.p.3.1',
    'onceflow.p.g3',
    'onceflow.p.g3.1.0',
    'onceflow.pq.g3.1',
    'onceflow.p.g03.1',
    'x.p.g3.1',
  ])
    assert.equal(parseGroupTransactionalId('p', id), undefined, id);
  // A pipeline whose name extends another's is not mistaken for it.
  assert.equal(parseGroupTransactionalId('p', groupTransactionalId('p.g1', 0, 0)), undefined);
});

test('WriteTxnMarkers v1 (the forced split): the request as the protocol lays it out; the response decoded per partition', async () => {
  const body: Buffer = (
    await writeTxnMarkersRequest({ producerId: 4001, producerEpoch: 3 }, true, 0, [
      { topic: 'out', partitions: [1] },
    ]).encode()
  ).buffer;
  const be = (n: number, bytes: number) => {
    const b = Buffer.alloc(bytes);
    if (bytes === 8) b.writeBigInt64BE(BigInt(n));
    else if (bytes === 4) b.writeInt32BE(n);
    else b.writeInt16BE(n);
    return [...b];
  };
  // header tags | markers (1+1) | producer id | epoch | commit | topics (1+1) | "out" (3+1) | partitions (1+1) | 1 | topic tags | coordinator epoch | marker tags | request tags
  assert.deepEqual(
    [...body],
    [0, 2, ...be(4001, 8), ...be(3, 2), 1, 2, 4, ...Buffer.from('out'), 2, ...be(1, 4), 0, ...be(0, 4), 0, 0],
  );
  const response = Buffer.from([
    0,
    2,
    ...be(4001, 8),
    2,
    4,
    ...Buffer.from('out'),
    3,
    ...be(1, 4),
    ...be(0, 2),
    0,
    ...be(2, 4),
    ...be(47, 2),
    0,
    0,
    0,
    0,
  ]);
  assert.deepEqual(decodeWriteTxnMarkers(response), [
    { topic: 'out', partition: 1, errorCode: 0 },
    { topic: 'out', partition: 2, errorCode: 47 },
  ]);
});

import { createRequire } from 'node:module';
import { groupMessagesLinear, messageProducerWith } from '../src/kafka/internals/message-producer';

const kafkajsRequire = createRequire(require.resolve('kafkajs'));

test('withoutAborted: enters every aborted transaction reached, leaves it at its ABORT marker, keeps committed ones', () => {
  const ABORT = Buffer.from([0, 0, 0, 0]);
  const COMMIT = Buffer.from([0, 0, 0, 1]);
  const rec = (offset: number, producerId: string, inTransaction = true) => ({
    offset: String(offset),
    batchContext: { producerId, inTransaction },
  });
  const ctl = (offset: number, producerId: string, key: Buffer) => ({
    offset: String(offset),
    isControlRecord: true,
    key,
    batchContext: { producerId, inTransaction: true },
  });
  const messages = [
    rec(10, '1'),
    rec(11, '2'),
    rec(12, '3'),
    ctl(13, '2', ABORT),
    ctl(14, '1', ABORT),
    ctl(15, '3', COMMIT),
    rec(16, '1'),
    rec(17, '4', false),
  ];
  // Listed in abort order, not by first offset (as the broker does).
  const visible = withoutAborted(messages, [
    { producerId: '2', firstOffset: '11' },
    { producerId: '1', firstOffset: '10' },
  ]);
  assert.deepEqual(
    visible.map((m) => m.offset),
    ['12', '16', '17'],
  );
  // A fetch starting inside both aborted transactions.
  assert.deepEqual(
    withoutAborted(messages.slice(2), [
      { producerId: '2', firstOffset: '11' },
      { producerId: '1', firstOffset: '10' },
    ]).map((m) => m.offset),
    ['12', '16', '17'],
  );
});

test("our transactions' sends group by partition as kafkajs does (same partitions, same order), while kafkajs keeps its own grouping", () => {
  const kafkajsGrouping = kafkajsRequire('./src/producer/groupMessagesPerPartition');
  const { DefaultPartitioner } = kafkajsRequire('./src/producer/partitioners');
  const partitionMetadata = [0, 1, 2, 3, 4].map((partitionId) => ({ partitionId, leader: 0 }));
  const messages = Array.from({ length: 500 }, (_, i) =>
    i % 3 === 0 ? { key: `k${i % 17}`, value: `v${i}` } : { partition: (i * 7) % 5, value: `v${i}` },
  );
  const args = { topic: 't', partitionMetadata, messages, partitioner: DefaultPartitioner() };
  assert.deepEqual(groupMessagesLinear(args), kafkajsGrouping(args));
  assert.deepEqual(groupMessagesLinear({ ...args, partitionMetadata: [] }), {});
  // Loading our producer left kafkajs's modules as they were.
  assert.equal(kafkajsRequire('./src/producer/groupMessagesPerPartition'), kafkajsGrouping);
  assert.notEqual(kafkajsGrouping, groupMessagesLinear);
});

test('a producer from messageProducerWith groups its sends with the grouping it was given', async () => {
  const seen: number[] = [];
  const create = messageProducerWith(({ messages }) => {
    seen.push(messages.length);
    throw Object.assign(new Error('grouping reached'), { retriable: false });
  });
  const { createLogger, LEVELS } = kafkajsRequire('./src/loggers');
  const createRetry = kafkajsRequire('./src/retry');
  const producer = create({
    logger: createLogger({ level: LEVELS.NOTHING, logCreator: () => () => undefined }),
    cluster: {
      refreshMetadataIfNecessary: async () => undefined,
      addMultipleTargetTopics: async () => undefined,
      findTopicPartitionMetadata: () => [{ partitionId: 0, leader: 0 }],
      isConnected: () => true,
    },
    partitioner: () => 0,
    eosManager: {},
    idempotent: false,
    retrier: createRetry({ retries: 0 }),
    getConnectionStatus: () => 'connected',
  });
  await assert.rejects(
    producer.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 'a' }, { value: 'b' }] }], acks: -1 }),
    /grouping reached/,
  );
  assert.deepEqual(seen, [2]);
});

test('coordinatorCache: one FindCoordinator per key and type; forgotten after a stale answer, a lost connection or a node gone from the metadata, kept after any other answer', async () => {
  const lookups: string[] = [];
  let coordinatorOf = 1;
  let answer: unknown = undefined;
  const brokers = new Map<string, { nodeId: number; endTxn: () => Promise<string> }>();
  const node = (nodeId: number) => ({
    nodeId,
    endTxn: async () => {
      if (answer) throw answer;
      return `node ${nodeId}`;
    },
  });
  for (const n of [1, 2]) brokers.set(String(n), node(n));
  const raw = {
    findGroupCoordinator: async ({ groupId, coordinatorType }: { groupId: string; coordinatorType: number }) => {
      lookups.push(`${coordinatorType}:${groupId}`);
      return brokers.get(String(coordinatorOf));
    },
    findBroker: async ({ nodeId }: { nodeId: string }) => {
      const b = brokers.get(nodeId);
      if (!b) throw Object.assign(new Error(`Broker ${nodeId} not found`), { name: 'KafkaJSBrokerNotFound' });
      return b;
    },
  };
  const find = coordinatorCache(raw);
  const call = async () => (await find('tid', COORDINATOR.TRANSACTION)).endTxn();
  assert.equal(await call(), 'node 1');
  assert.equal(await call(), 'node 1');
  assert.deepEqual(lookups, ['1:tid'], 'asked once');
  await find('tid', COORDINATOR.GROUP);
  assert.deepEqual(lookups, ['1:tid', '0:tid'], 'a group of the same name is another key');

  coordinatorOf = 2; // the coordinator moved; node 1 still answers until it says so
  answer = Object.assign(new Error('fenced'), { type: 'INVALID_PRODUCER_EPOCH' });
  await assert.rejects(call(), /fenced/);
  answer = undefined;
  assert.equal(await call(), 'node 1', 'an answer that is not about the coordinator keeps it');
  answer = Object.assign(new Error('not coordinator'), { type: 'NOT_COORDINATOR_FOR_GROUP' });
  await assert.rejects(call(), /not coordinator/);
  answer = undefined;
  assert.equal(await call(), 'node 2', 'NOT_COORDINATOR: asked again');

  coordinatorOf = 1;
  answer = Object.assign(new Error('Connection closed'), { name: 'KafkaJSConnectionClosedError' });
  await assert.rejects(call(), /Connection closed/);
  answer = undefined;
  assert.equal(await call(), 'node 1', 'a lost connection: asked again');

  coordinatorOf = 2;
  brokers.delete('1');
  assert.equal(await call(), 'node 2', 'a node gone from the metadata: asked again');
  assert.deepEqual(lookups, ['1:tid', '0:tid', '1:tid', '1:tid', '1:tid']);

  // A late stale answer from a node that is no longer the remembered one forgets nothing: a
  // request to the old coordinator (1) still in flight when another one learnt the new (2).
  brokers.set('1', node(1));
  coordinatorOf = 1;
  answer = Object.assign(new Error('Connection closed'), { name: 'KafkaJSConnectionClosedError' });
  await assert.rejects(call(), /Connection closed/);
  answer = undefined;
  let release: () => void = () => undefined;
  const held = new Promise<void>((r) => (release = r));
  brokers.set('1', {
    nodeId: 1,
    endTxn: async () => {
      await held;
      throw Object.assign(new Error('not coordinator'), { type: 'NOT_COORDINATOR_FOR_GROUP' });
    },
  });
  const late = (await find('tid', COORDINATOR.TRANSACTION)).endTxn(); // to node 1, the one remembered
  brokers.set('1', node(1));
  answer = Object.assign(new Error('Connection closed'), { name: 'KafkaJSConnectionClosedError' });
  await assert.rejects(call(), /Connection closed/); // node 1 forgotten, meanwhile
  answer = undefined;
  coordinatorOf = 2;
  assert.equal(await call(), 'node 2', 'the new coordinator learnt');
  release();
  await assert.rejects(late, /not coordinator/);
  assert.equal(await call(), 'node 2', "still remembered after the old node's late answer");
  assert.deepEqual(lookups, ['1:tid', '0:tid', '1:tid', '1:tid', '1:tid', '1:tid', '1:tid']);
});

import { combineRows, onDuplicateSql, rowProblem, tableRows, type SqlValue } from '../src/mysql/sink';
import { possibleRows } from '../src/mysql/table-mode';
import type { TableSpec } from '../src/spec';

/** One table per mode, keyed by `k` (no create: the key is what onDuplicate does not update). */
const modeTable = (onDuplicate: TableSpec['onDuplicate'], columns = ['k', 'val', 'v']): TableSpec => ({
  name: 'm',
  columns,
  onDuplicate,
});
const NEWEST = modeTable({ kind: 'newest', version: 'v', columns: ['val'] });
/** Insert-only needs a declared key: without one every column is part of it. */
const IGNORE: TableSpec = {
  ...modeTable({ kind: 'ignore' }),
  create: { columns: { k: 'VARCHAR(8)', val: 'INT', v: 'INT' }, primaryKey: ['k'] },
};

test('table modes in definitions: newest needs a version column of the table, outside the key; the old forms keep validating', () => {
  const withTable = (t: TableSpec) => definePipeline({ ...base, mysqlSink: { tables: [t] } });
  assert.deepEqual(withTable(NEWEST).mysqlSink.tables[0]!.onDuplicate, {
    kind: 'newest',
    version: 'v',
    columns: ['val'],
  });
  assert.doesNotThrow(() => withTable(modeTable({ kind: 'newest', version: 'v' } as TableSpec['onDuplicate'])));
  for (const od of [
    { kind: 'accumulate', columns: ['v'] },
    { kind: 'replace', columns: ['val', 'v'] },
    { kind: 'ignore' },
  ] as TableSpec['onDuplicate'][])
    assert.doesNotThrow(() => withTable(modeTable(od)));
  const problems = (t: TableSpec) => {
    try {
      withTable(t);
    } catch (e) {
      assert.ok(e instanceof ValidationError);
      return e.message;
    }
    assert.fail('expected a ValidationError');
  };
  assert.match(
    problems(modeTable({ kind: 'newest', columns: ['val'] } as never)),
    /onDuplicate\.version: must name the version column/,
  );
  assert.match(
    problems(modeTable({ kind: 'newest', version: 'v`x', columns: ['val'] })),
    /onDuplicate\.version: must name the version column/,
  );
  assert.match(
    problems(modeTable({ kind: 'newest', version: 'seen', columns: ['val'] })),
    /onDuplicate\.version: 'seen' is not one of the table's columns \(k, val, v\)/,
  );
  assert.match(
    problems({ ...NEWEST, create: { columns: { k: 'INT', val: 'INT', v: 'INT' }, primaryKey: ['k', 'v'] } }),
    /onDuplicate\.version: 'v' is in create\.primaryKey/,
  );
  assert.match(
    problems(modeTable({ kind: 'replace', columns: ['val'], version: 'v' } as never)),
    /onDuplicate\.version: is only for kind 'newest'/,
  );
  assert.match(
    problems(modeTable({ kind: 'latest' } as never)),
    /onDuplicate\.kind: must be 'accumulate' \(add up\), 'replace' \(last write wins\), 'newest'/,
  );
  // A config file: a misspelt field gets its did-you-mean from the schema.
  const dir = mkdtempSync(join(tmpdir(), 'onceflow-modes-'));
  const file = join(dir, 'p.json');
  writeFileSync(
    file,
    JSON.stringify({
      pipeline: { ...base, mysqlSink: { tables: [{ ...NEWEST, onDuplicate: { kind: 'newest', verison: 'v' } }] } },
    }),
  );
  assert.throws(
    () => loadPipelineConfig(file, { ONCEFLOW_SERVICES_ENV: '/dev/null', ONCEFLOW_MYSQL_PASSWORD: 'x' }),
    /pipeline\.mysqlSink\.tables\[0\]\.onDuplicate\.verison: is not a known field — did you mean 'version'\?/,
  );
  // A config file that still sets a removed field: told it was removed, not that it is unknown.
  writeFileSync(
    file,
    JSON.stringify({ pipeline: { ...base, epoch: { maxRecords: 1000, commitWithNextPrepare: false } } }),
  );
  assert.throws(
    () => loadPipelineConfig(file, { ONCEFLOW_SERVICES_ENV: '/dev/null', ONCEFLOW_MYSQL_PASSWORD: 'x' }),
    (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(
        e.problems.map((p) => p.field),
        ['pipeline.epoch.commitWithNextPrepare'],
      );
      assert.match(e.message, /pipeline\.epoch\.commitWithNextPrepare: was removed: .*Delete the field/);
      return true;
    },
  );
});

test('table modes in SQL: newest assigns each column only when the incoming version is greater, the version last; both dialects and the staged apply', () => {
  assert.equal(
    upsertSql(NEWEST, 1, 'mariadb'),
    'INSERT INTO `m` (`k`, `val`, `v`) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE `val` = IF((`v` IS NULL OR VALUES(`v`) > `v`), VALUES(`val`), `val`), `v` = IF((`v` IS NULL OR VALUES(`v`) > `v`), VALUES(`v`), `v`)',
  );
  assert.equal(
    upsertSql(NEWEST, 1, 'mysql'),
    'INSERT INTO `m` (`k`, `val`, `v`) VALUES (?, ?, ?) AS new ON DUPLICATE KEY UPDATE `val` = IF((`v` IS NULL OR new.`v` > `v`), new.`val`, `val`), `v` = IF((`v` IS NULL OR new.`v` > `v`), new.`v`, `v`)',
  );
  // Listing the version among the columns changes nothing: it is still assigned last.
  assert.equal(
    upsertSql(modeTable({ kind: 'newest', version: 'v', columns: ['v', 'val'] }), 1, 'mariadb'),
    upsertSql(NEWEST, 1, 'mariadb'),
  );
  assert.equal(
    onDuplicateSql(
      NEWEST,
      (c) => `s.${c}`,
      (c) => `t.${c}`,
    ),
    ' ON DUPLICATE KEY UPDATE t.val = IF((t.v IS NULL OR s.v > t.v), s.val, t.val), t.v = IF((t.v IS NULL OR s.v > t.v), s.v, t.v)',
  );
  assert.equal(
    upsertSql(modeTable({ kind: 'replace', columns: ['val', 'v'] }), 1, 'mariadb'),
    'INSERT INTO `m` (`k`, `val`, `v`) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE `val` = VALUES(`val`), `v` = VALUES(`v`)',
  );
  assert.equal(
    upsertSql(modeTable({ kind: 'ignore' }), 1, 'mysql'),
    'INSERT IGNORE INTO `m` (`k`, `val`, `v`) VALUES (?, ?, ?)',
  );
});

test('table modes when combining an epoch: accumulate sums, replace keeps the last, newest the greatest version (the first of equal ones), ignore the first', () => {
  const rows = [
    ['a', 10, 3],
    ['b', 1, 1],
    ['a', 20, 5],
    ['a', 30, 5],
    ['a', 40, 4],
  ];
  const combined = (t: TableSpec) =>
    combineRows(
      t,
      rows.map((r) => [...r]),
    );
  assert.deepEqual(combined(modeTable({ kind: 'accumulate', columns: ['val', 'v'] })), [
    ['a', 100, 17],
    ['b', 1, 1],
  ]);
  assert.deepEqual(combined(modeTable({ kind: 'replace', columns: ['val', 'v'] })), [
    ['a', 40, 4],
    ['b', 1, 1],
  ]);
  assert.deepEqual(combined(NEWEST), [
    ['a', 20, 5],
    ['b', 1, 1],
  ]);
  assert.deepEqual(combined(IGNORE), [
    ['a', 10, 3],
    ['b', 1, 1],
  ]);
  // Versions as dates compare by time; versions of two kinds are left to MySQL, uncombined.
  const d = (s: string) => new Date(s);
  assert.deepEqual(
    combineRows(NEWEST, [
      ['a', 1, d('2026-01-02')],
      ['a', 2, d('2026-01-03')],
      ['a', 3, d('2026-01-01')],
    ]),
    [['a', 2, d('2026-01-03')]],
  );
  const mixed = [
    ['a', 1, 5],
    ['a', 2, d('2026-01-01')],
  ];
  assert.equal(combineRows(NEWEST, mixed), mixed);
});

test('a newest-wins row without a comparable version is a bad record with the reason', async () => {
  const tables = new Map([['m', NEWEST]]);
  assert.equal(rowProblem({ table: 'm', values: { k: 'a', val: 1, v: 7 } }, tables), null);
  assert.match(
    String(rowProblem({ table: 'm', values: { k: 'a', val: 1, v: null } }, tables)),
    /row for 'm' has no version: column 'v' is null/,
  );
  assert.match(
    String(rowProblem({ table: 'm', values: { k: 'a', val: 1, v: '2026-01-01' } }, tables)),
    /not a number, a bigint or a Date; convert it in the transform/,
  );
  const spec = definePipeline({ ...base, mysqlSink: { tables: [NEWEST] } });
  const rec = { topic: 'in', partition: 0, offset: 4, key: null, value: null, headers: {}, timestamp: '0' };
  const out = await applyTransform(
    spec,
    { map: () => ({ mysql: [{ table: 'm', values: { k: 'a', val: 1, v: null } }] }) },
    [rec],
    { pipeline: 'p1', partition: 0, epoch: 1, attempt: 1, options: {} },
    tables,
  );
  assert.equal(out.rows.length, 0);
  assert.match(String(out.deadLetters[0]!.headers?.['onceflow.error']), /has no version/);
});

test('a boolean row value is written as 1 or 0, the same number in the statement, the staged rows and an accumulate sum', () => {
  const acc = modeTable({ kind: 'accumulate', columns: ['v'] }, ['k', 'flag', 'v']);
  const tables = new Map([['m', acc]]);
  const ops = [
    { table: 'm', values: { k: true, flag: false, v: true } },
    { table: 'm', values: { k: true, flag: false, v: true } },
    { table: 'm', values: { k: false, flag: true, v: false } },
  ];
  for (const op of ops) assert.equal(rowProblem(op, tables), null);
  const rows = tableRows(ops, tables);
  // Keys true/false became 1/0 (so true and 1 are one key, as in the table), v summed as numbers.
  assert.deepEqual(rows[0]![1], [
    [0, 1, 0],
    [1, 0, 2],
  ]);
  assert.deepEqual(decodeRows(bodiesOf(rows), [acc])[0]![1], rows[0]![1]);
});

test('a row value that is not an SQL value (array, object, undefined, NaN, bad Date) is a bad record naming the column', async () => {
  const tables = new Map([['m', NEWEST]]);
  const problem = (val: unknown) => rowProblem({ table: 'm', values: { k: 'a', val: val as SqlValue, v: 7 } }, tables);
  for (const ok of [null, 'x', 1.5, 10n, true, false, new Date(0), Buffer.from('x')]) assert.equal(problem(ok), null);
  for (const [bad, says] of [
    [['x', 'y'], /column 'val' is an array; .*JSON\.stringify it for a JSON column/],
    [{ a: 1 }, /column 'val' is an object/],
    [{ n: '5' }, /column 'val' is an object/], // the staged rows' tag for a bigint: never taken for one
    [undefined, /column 'val' is undefined \(a missing field\?\); give null for SQL NULL/],
    [NaN, /column 'val' is NaN, which no SQL column holds/],
    [new Date('nope'), /column 'val' is an invalid Date/],
  ] as const)
    assert.match(String(problem(bad)), says);
  // Dead-lettered with its reason, the record's other rows and outputs not written.
  const spec = definePipeline({ ...base, mysqlSink: { tables: [NEWEST] } });
  const rec = (offset: number) => ({
    topic: 'in',
    partition: 0,
    offset,
    key: null,
    value: null,
    headers: {},
    timestamp: '0',
  });
  const out = await applyTransform(
    spec,
    {
      map: (r) => ({
        kafka: [{ value: 'v' }],
        mysql: [{ table: 'm', values: { k: 'a', val: (r.offset === 1 ? [1, 2] : 1) as SqlValue, v: 7 } }],
      }),
    },
    [rec(0), rec(1), rec(2)],
    { pipeline: 'p1', partition: 0, epoch: 1, attempt: 1, options: {} },
    tables,
  );
  assert.equal(out.rows.length, 2);
  assert.equal(out.outputs.length, 2);
  assert.equal(out.deadLetters[0]!.headers?.['onceflow.reason'], 'row-mismatch');
  assert.match(String(out.deadLetters[0]!.headers?.['onceflow.error']), /column 'val' is an array/);
});

test("verify's expectation per mode, from each source partition's rows of a key: what some order of their commits leaves", () => {
  // Partition 0 wrote a: (10, v3) then (20, v5); partition 1 wrote (30, v4) then (40, v2): combined per partition in record order.
  const perPartition = (t: TableSpec) => [
    combineRows(t, [
      ['a', 10, 3],
      ['a', 20, 5],
    ])[0]!,
    combineRows(t, [
      ['a', 30, 4],
      ['a', 40, 2],
    ])[0]!,
  ];
  const p = (t: TableSpec) => {
    const r = possibleRows(t, perPartition(t));
    return { updated: r.updated, kept: r.kept };
  };
  assert.deepEqual(p(modeTable({ kind: 'accumulate', columns: ['val', 'v'] })), {
    updated: [[100, 14]],
    kept: [['a'], ['a']],
  });
  assert.deepEqual(p(modeTable({ kind: 'replace', columns: ['val', 'v'] })), {
    updated: [
      [20, 5],
      [40, 2],
    ],
    kept: [['a'], ['a']],
  });
  assert.deepEqual(p(NEWEST), { updated: [[20, 5]], kept: [['a'], ['a']] });
  assert.deepEqual(p(IGNORE), {
    updated: [[], []],
    kept: [
      ['a', 10, 3],
      ['a', 30, 4],
    ],
  });
  // Equal greatest versions in two partitions: either may have committed first and stayed.
  assert.deepEqual(
    possibleRows(NEWEST, [
      ['a', 1, 9],
      ['a', 2, 9],
      ['a', 3, 8],
    ]).updated,
    [
      [1, 9],
      [2, 9],
    ],
  );
});

import { deadLettersAllowed, haltIfOverBudget, type EpochPart } from '../src/activities/budget';
import { PipelineHalted } from '../src/errors';
import { budgetCheck, deadLetterSummary } from '../src/verify';
import { deadLetterLine } from '../src/cli/report';

test('the dead-letter budget: one bad record in a small epoch passes, a transform failing on every record does not', () => {
  const d = definePipeline(base).deadLetter!;
  assert.deepEqual(d, { maxRatio: 0.01, maxPerEpoch: 100 });
  // An epoch: min(maxPerEpoch, max(1, floor(ratio * n))).
  assert.equal(deadLettersAllowed(d, 1, 'epoch'), 1);
  assert.equal(deadLettersAllowed(d, 3, 'epoch'), 1);
  assert.equal(deadLettersAllowed(d, 250, 'epoch'), 2);
  assert.equal(deadLettersAllowed(d, 5000, 'epoch'), 50);
  assert.equal(deadLettersAllowed(d, 1_000_000, 'epoch'), 100, 'capped by maxPerEpoch');
  assert.equal(deadLettersAllowed(d, 1_000_000, 'run'), 10_000, 'a run: the ratio alone');
  for (const n of [2, 3, 100, 5000, 100_000])
    assert.ok(n > deadLettersAllowed(d, n, 'epoch'), `every record of ${n} failing is over the budget`);
  assert.equal(deadLettersAllowed({ maxRatio: 0.5, maxPerEpoch: 0 }, 1000, 'epoch'), 0, 'maxPerEpoch 0: none');
  assert.equal(deadLettersAllowed({ maxRatio: 0.5, maxPerEpoch: 0 }, 1000, 'run'), 0);
  assert.equal(
    deadLettersAllowed({ maxRatio: 1, maxPerEpoch: 5000 }, 5000, 'epoch'),
    5000,
    'maxRatio 1: never halts within maxPerEpoch',
  );

  assert.equal(
    definePipeline({ ...base, deadLetter: { maxRatio: 0.2 } }).deadLetter!.maxPerEpoch,
    100,
    'a partial setting keeps the other default',
  );
  assert.throws(
    () => definePipeline({ ...base, deadLetter: { maxRatio: 1.5, maxPerEpoch: -1 } }),
    (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.match(e.message, /deadLetter\.maxRatio: must be a number from 0 to 1/);
      assert.match(e.message, /deadLetter\.maxPerEpoch: must be an integer ≥ 0/);
      return true;
    },
  );
  assert.throws(
    () => definePipeline({ ...base, deadLetter: { maxRatoi: 0.1 } as never }),
    /deadLetter\.maxRatoi: is not a known field — did you mean 'maxRatio'\? \(known: maxRatio, maxPerEpoch\)/,
  );
  // Two unknown fields of one object: a problem each, each with its own hint.
  assert.throws(
    () => definePipeline({ ...base, deadLetter: { maxRatio: 0.1, maxPerEpoh: 3, ratio: 1 } as never }),
    (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(
        e.problems.map((p) => p.field),
        ['deadLetter.maxPerEpoh', 'deadLetter.ratio'],
      );
      assert.match(e.problems[0]!.problem, /did you mean 'maxPerEpoch'\?/);
      assert.doesNotMatch(e.problems[1]!.problem, /did you mean/);
      return true;
    },
  );
});

test('haltIfOverBudget: over the budget or a row for an undeclared table throws PipelineHalted naming the transform, the record and the way to resume', async () => {
  const spec = compareSpec({ name: 'u', source: { topic: 'in' }, kafkaSink: { topic: 'out' } });
  const rec = (offset: number, value: string) => ({
    topic: 'in',
    partition: 3,
    offset,
    key: null,
    value: Buffer.from(value),
    headers: {},
    timestamp: '0',
  });
  const good = JSON.stringify({ id: 'a', slot_time: 't', key1: 'k', key2: 'k', key3: 'k', indicate: 3 });
  const ctx = { pipeline: 'u', partition: 3, epoch: 4, attempt: 1, options: {} };
  const events: unknown[] = [];
  const logged: string[] = [];
  const actx = { observe: (e: unknown) => void events.push(e), error: (m: string) => void logged.push(m) };
  const part = async (values: string[], transform = compareTransform): Promise<EpochPart> => ({
    partition: 3,
    epoch: 4,
    records: values.length,
    applied: await applyTransform(
      spec,
      transform,
      values.map((v, i) => rec(40 + i, v)),
      ctx,
      tableMap(spec),
    ),
  });

  // One poison record among three: within the default budget, dead-lettered with its reason class.
  const one = await part([good, '{oops', good]);
  haltIfOverBudget(actx, spec, 'partition 3 epoch 4', [one]);
  assert.equal(one.applied.deadLetters[0]!.headers?.['onceflow.reason'], 'transform-error');
  assert.equal(events.length, 0);

  // Every record failing: halted, nothing to write.
  const all = await part(['{a', '{b', '{c']);
  assert.throws(
    () => haltIfOverBudget(actx, spec, 'partition 3 epoch 4', [all]),
    (e: unknown) => {
      assert.ok(e instanceof PipelineHalted);
      assert.equal(e.retryable, false);
      assert.match(e.message, /transform 'flink-compare' failed on 3 of 3 records, over the dead-letter budget of 1/);
      assert.match(e.message, /First failing record: topic 'in', partition 3, offset 40 — transform-error: .*not JSON/);
      assert.match(
        e.message,
        /Nothing of this epoch was committed\. Once fixed, restart the workers and start the pipeline again/,
      );
      assert.deepEqual(e.details, {
        pipeline: 'u',
        partition: 3,
        epoch: 4,
        cause: 'dead-letter-budget',
        record: 'in/3/40',
        error: String(all.applied.firstFailure!.error),
      });
      return true;
    },
  );
  assert.deepEqual(events, [{ kind: 'halted', pipeline: 'u', partition: 3, epoch: 4, cause: 'dead-letter-budget' }]);
  assert.equal(logged.length, 1);
  // Judged over the epoch as a whole (a group epoch's members together): 3 of 300 at 1% pass.
  const many = await part(Array.from({ length: 100 }, () => good));
  const three = await part([good, '{x', good]);
  haltIfOverBudget(actx, spec, 'group 0 epoch 1', [many, many, { ...three, partition: 5 }]);
  assert.throws(
    () => haltIfOverBudget(actx, spec, 'group 0 epoch 1', [many, { ...all, partition: 5 }]),
    /over the dead-letter budget of 1.*partition 3, offset 40/s,
  );

  // A row for a table the pipeline does not declare: halted even once, naming the table, the declared ones and the record.
  const undeclared = await part([good, good], {
    map: (r) => (r.offset === 41 ? { mysql: [{ table: 'nope', values: {} }] } : { kafka: [{ value: 'v' }] }),
  });
  assert.equal(undeclared.applied.deadLetters[0]!.headers?.['onceflow.reason'], 'undeclared-table');
  assert.throws(
    () => haltIfOverBudget(actx, spec, 'partition 3 epoch 4', [undeclared]),
    (e: unknown) => {
      assert.ok(e instanceof PipelineHalted);
      assert.match(
        e.message,
        /wrote a row for table 'nope', which the pipeline does not declare \(declared: test_two_step_compare\); record topic 'in', partition 3, offset 41/,
      );
      assert.equal(e.details.cause, 'undeclared-table');
      return true;
    },
  );
  // A row that lacks a column stays a dead letter within the budget.
  const lacking = await part([good, good, good], {
    map: (r) =>
      r.offset === 41
        ? { mysql: [{ table: 'test_two_step_compare', values: { slot_time: 't' } }] }
        : { kafka: [{ value: 'v' }] },
  });
  assert.equal(lacking.applied.deadLetters[0]!.headers?.['onceflow.reason'], 'row-mismatch');
  haltIfOverBudget(actx, spec, 'partition 3 epoch 4', [lacking]);
});

test("verify's dead-letter line counts per reason, and the run fails above its budget", () => {
  const spec = compareSpec({
    name: 'u',
    source: { topic: 'in' },
    kafkaSink: { topic: 'out' },
    deadLetter: { maxRatio: 0.05 },
  });
  const dl = (reason: string | undefined, error = 'transform failed: x') => ({
    headers: { 'onceflow.error': Buffer.from(error), ...(reason ? { 'onceflow.reason': Buffer.from(reason) } : {}) },
  });
  const within = deadLetterSummary(
    spec,
    [dl('transform-error'), dl('transform-error'), dl('row-mismatch'), dl(undefined)],
    100,
  );
  assert.deepEqual(within, {
    total: 4,
    byReason: { 'transform-error': 2, 'row-mismatch': 1, 'transform failed': 1 },
    allowed: 5,
    maxRatio: 0.05,
  });
  assert.equal(
    deadLetterLine(within),
    'dead letters: 4 (budget 5) — transform-error 2, row-mismatch 1, transform failed 1',
  );
  assert.equal(budgetCheck(within, 100).ok, true);
  const over = deadLetterSummary(
    spec,
    Array.from({ length: 6 }, () => dl('transform-error')),
    100,
  );
  const check = budgetCheck(over, 100);
  assert.equal(check.ok, false);
  assert.match(check.detail, /6 of 100 source records, at most 5 allowed .*raise pipeline\.deadLetter/);
  assert.equal(deadLetterLine(deadLetterSummary(spec, [], 0)), 'dead letters: 0 (budget 1)');
});

test('a halt is a metric and a terminal line of its own', async () => {
  const m = new WorkerMetrics();
  m.observe({ kind: 'halted', pipeline: 'p', partition: 2, epoch: 0, cause: 'dead-letter-budget' });
  assert.match(await m.text(), /onceflow_halts_total\{[^}]*cause="dead-letter-budget"[^}]*\} 1/);
  assert.equal(
    summarize({
      level: 'ERROR',
      message: "pipeline 'p' halted at partition 2 epoch 0: …",
      meta: { activityType: 'prepareEpoch', attempt: 1, workflowId: 'onceflow/p/2' },
    }),
    "  error: prepareEpoch attempt 1 of onceflow/p/2 — pipeline 'p' halted at partition 2 epoch 0: …",
  );
});

import { mkdirSync, existsSync as fileExists, statSync } from 'node:fs';
import { dirname as dirOf, resolve as resolvePath } from 'node:path';
import { installedFromTarball, onceflowDependency } from '../src/cli/init';

test('onceflow init run from a local tarball depends on that tarball; from a checkout or with --onceflow, on what was asked', () => {
  // What `npx --package=<tgz>` leaves: a project whose lockfile records the tarball relative to it.
  const root = mkdtempSync(join(tmpdir(), 'onceflow-npx-'));
  const project = join(root, 'npx', 'abc');
  const pkg = join(project, 'node_modules', 'onceflow');
  mkdirSync(pkg, { recursive: true });
  mkdirSync(join(root, 'packs'));
  writeFileSync(join(root, 'packs', 'onceflow-0.1.0.tgz'), '');
  writeFileSync(
    join(project, 'node_modules', '.package-lock.json'),
    JSON.stringify({
      packages: { 'node_modules/onceflow': { version: '0.1.0', resolved: 'file:../../packs/onceflow-0.1.0.tgz' } },
    }),
  );
  const tgz = `file:${join(root, 'packs', 'onceflow-0.1.0.tgz')}`;
  assert.equal(installedFromTarball(pkg), tgz);
  assert.equal(onceflowDependency('^0.1.0', '0.1.0', tgz), tgz);
  assert.equal(
    onceflowDependency('file:/elsewhere.tgz', '0.1.0', tgz),
    'file:/elsewhere.tgz',
    'an explicit --onceflow wins',
  );
  assert.equal(onceflowDependency('^0.1.0', '0.1.0', undefined), '^0.1.0');
  // Installed from a registry, a tarball since deleted, or not under node_modules at all: no tarball.
  writeFileSync(
    join(project, 'node_modules', '.package-lock.json'),
    JSON.stringify({
      packages: { 'node_modules/onceflow': { resolved: 'https://registry.npmjs.org/onceflow/-/onceflow-0.1.0.tgz' } },
    }),
  );
  assert.equal(installedFromTarball(pkg), undefined);
  writeFileSync(
    join(project, 'node_modules', '.package-lock.json'),
    JSON.stringify({ packages: { 'node_modules/onceflow': { resolved: 'file:../../packs/gone-0.1.0.tgz' } } }),
  );
  assert.equal(installedFromTarball(pkg), undefined);
  assert.equal(installedFromTarball(resolvePath(__dirname, '..')), undefined);
});

test('README.md stays at most 12 KB (its links and the names it mentions: test/docs.test.ts)', () => {
  const readme = resolvePath(__dirname, '..', 'README.md');
  const size = statSync(readme).size;
  assert.ok(size <= 12_288, `README.md is ${size} bytes, over 12,288: move details to docs/ and link them`);
});

import { readdirSync } from 'node:fs';

/** The src/ modules a module reaches through its relative imports (static, `export … from`, require), itself included. */
function reachable(entry: string): Set<string> {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:from\s+|require\(|import\()'(\.{1,2}\/[^']*)'/g)) {
      const base = resolvePath(dirOf(file), m[1]!);
      // A relative path that is no module here is text (e.g. a scaffold's source in src/cli/init.ts).
      const next = [`${base}.ts`, resolvePath(base, 'index.ts')].find((f) => fileExists(f));
      if (next) visit(next);
    }
  };
  visit(entry);
  return seen;
}

test('the public API (the package root and onceflow/workflows) reaches nothing in src/cli/, and only src/config/ reads process.env', () => {
  const src = resolvePath(__dirname, '..', 'src');
  for (const [entry, deep] of [
    ['index.ts', 'kafka/internals/cluster.ts'],
    ['workflows/index.ts', 'protocol/epoch.ts'],
  ] as const) {
    const modules = [...reachable(resolvePath(src, entry))].map((f) => f.slice(src.length + 1));
    assert.ok(
      modules.includes(deep),
      `the walk from src/${entry} did not reach src/${deep}: is it still following imports?`,
    );
    assert.deepEqual(
      modules.filter((f) => f.startsWith('cli/')),
      [],
      `src/${entry} reaches CLI modules`,
    );
  }
  const files = (readdirSync(src, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'));
  assert.deepEqual(
    files.filter((f) => !f.startsWith('config/') && readFileSync(resolvePath(src, f), 'utf8').includes('process.env')),
    [],
    'process.env outside src/config/',
  );
});

import { execFileSync } from 'node:child_process';
import { configJsonSchemaText, CONFIG_JSON_SCHEMA_FILE } from '../src/schema/config-file';
import { FIELD_SETTINGS } from '../src/config';

test('the published JSON Schema is the one the zod schema generates (run `npm run schema` after changing a field)', () => {
  const committed = readFileSync(join(__dirname, '..', CONFIG_JSON_SCHEMA_FILE), 'utf8');
  assert.ok(
    committed === configJsonSchemaText(),
    `${CONFIG_JSON_SCHEMA_FILE} differs from what src/schema/config-file.ts generates: run npm run schema and commit it`,
  );
  const schema = JSON.parse(committed);
  const pipeline = schema.properties.pipeline;
  // What editors show: defaults, descriptions, and no unknown fields.
  assert.equal(pipeline.additionalProperties, false);
  assert.equal(pipeline.properties.epoch.properties.maxRecords.default, 5000);
  assert.match(pipeline.properties.mysqlSink.properties.mode.description, /^staged \(default\)/);
  assert.equal(schema.properties.connections.properties.kafka.properties.sasl.additionalProperties, false);
  // Every connections field a file may set stands for a setting, and every setting mapped is a field.
  type Node = { properties?: Record<string, Node> };
  const leaves = (n: Node, at: string): string[] =>
    n.properties ? Object.entries(n.properties).flatMap(([k, v]) => leaves(v, at ? `${at}.${k}` : k)) : [at];
  assert.deepEqual(leaves(schema.properties.connections, '').sort(), Object.keys(FIELD_SETTINGS).sort());
});

test('workflow code loads no zod: src/spec.ts takes the schema as types only', () => {
  const probe = "require('./src/workflows'); console.log(JSON.stringify(Object.keys(require.cache)))";
  const modules: string[] = JSON.parse(
    execFileSync(process.execPath, ['--import', 'tsx', '-e', probe], { cwd: join(__dirname, '..'), encoding: 'utf8' }),
  );
  assert.ok(
    modules.some((m) => m.endsWith(join('src', 'spec.ts'))),
    'the probe loaded src/spec.ts',
  );
  assert.deepEqual(
    modules.filter((m) => m.includes(join('node_modules', 'zod')) || m.includes(join('src', 'schema'))),
    [],
  );
});

test('a config file is checked whole: unknown, mistyped and removed fields and the values definePipeline refuses, each by its field', () => {
  const file = join(mkdtempSync(join(tmpdir(), 'onceflow-schema-')), 'p.yaml');
  writeFileSync(
    file,
    [
      'pipeline:',
      '  name: Bad Name',
      '  source: { topic: in, startFrom: first }',
      '  transform: t',
      '  kafkaSink: { topic: in, transactionTimeoutMs: long }',
      '  mysqlSink: { tables: [] }',
      '  epochs: { maxRecords: 5 }',
      'connections: { kafka: { brokerz: [a] } }',
    ].join('\n'),
  );
  assert.throws(
    () => loadPipelineConfig(file, { ONCEFLOW_SERVICES_ENV: '/dev/null', ONCEFLOW_MYSQL_PASSWORD: 'x' }),
    (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(Object.fromEntries(e.problems.map((p) => [p.field, p.problem])), {
        'pipeline.name':
          "must match /^[a-z0-9][a-z0-9._-]{0,39}$/ (lower-case letters, digits, '.', '_', '-'; at most 40), got \"Bad Name\"",
        'pipeline.source.startFrom': "must be 'earliest' or 'latest', got \"first\"",
        'pipeline.kafkaSink.transactionTimeoutMs': 'must be an integer, got string "long"',
        'pipeline.epochs':
          "is not a known field — did you mean 'epoch'? (known: name, source, transform, transformOptions, kafkaSink, mysqlSink, deadLetterTopic, progressTopic, deadLetter, epoch, epochsPerRun, parallelism)",
        'connections.kafka.brokerz':
          "is not a known field — did you mean 'brokers'? (known: brokers, replicationFactor, ssl, sasl)",
      });
      return true;
    },
  );
  writeFileSync(
    file,
    'pipeline: { name: p, source: { topic: in }, transform: t, kafkaSink: { topic: in }, mysqlSink: { tables: [{ name: t, columns: [a], onDuplicate: { kind: replace, columns: [b] } }] } }\n',
  );
  assert.throws(
    () => loadPipelineConfig(file, { ONCEFLOW_SERVICES_ENV: '/dev/null', ONCEFLOW_MYSQL_PASSWORD: 'x' }),
    (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(
        e.problems.map((p) => p.field),
        ['pipeline.mysqlSink.tables[0].onDuplicate.columns[0]', 'pipeline.kafkaSink.topic'],
      );
      return true;
    },
  );
  assert.throws(() => definePipeline(undefined as never), /\(definition\): is required/);
});

import { takeShares, type Member } from '../src/activities/source';
import type { FetchResult } from '../src/kafka/internals';

test("a group's read: a partition the broker left out of a Fetch round keeps its share of the epoch", () => {
  // Three partitions of 300 records of 200 B each, an epoch of 99 records.
  const bounds = { maxRecords: 99, maxBytes: 1 << 30, maxWaitMs: 1000 };
  const answer = (from: number, to: number): FetchResult => ({
    records: Array.from({ length: to - from }, (_, i) => ({
      offset: from + i,
      key: null,
      value: Buffer.alloc(200),
      headers: {},
      timestamp: '0',
    })),
    nextOffset: to,
    highWatermark: 300,
    lastStableOffset: 300,
    logStartOffset: 0,
  });
  const state: Member[] = [0, 1, 2].map((partition) => ({
    topic: 't',
    partition,
    read: { records: [], end: 0, sourceEnd: 0 },
    caughtUp: false,
  }));
  const total = { records: 0, bytes: 0 };
  // The broker returned partition 0's records and left 1 and 2 out (their batches did not fit
  // the rest of the Fetch): partition 0 takes a third, and is fetched again from there.
  assert.equal(takeShares(state, [answer(0, 300), answer(0, 0), answer(0, 0)], bounds, total), false);
  assert.deepEqual(
    state.map((m) => [m.read.records.length, m.read.end, m.caughtUp]),
    [
      [33, 33, false],
      [0, 0, false],
      [0, 0, false],
    ],
  );
  assert.deepEqual(total, { records: 33, bytes: 33 * 200 });
  // The next round all three answer, and share the 66 left.
  assert.equal(takeShares(state, [answer(33, 300), answer(0, 300), answer(0, 300)], bounds, total), true);
  assert.deepEqual(
    state.map((m) => [m.read.records.length, m.read.end]),
    [
      [55, 55],
      [22, 22],
      [22, 22],
    ],
  );
});

import { groupMemo, MEMO_MEMBERS } from '../src/workflows/memo';

test("a group's memo names its first partitions and counts the rest: under the server's 2 KB warning at 128 partitions per group", () => {
  const spec = definePipeline({ ...base, parallelism: 2 });
  const members = (n: number) =>
    Array.from({ length: n }, (_, k) => ({
      id: 2 * k,
      topic: 'orders.events-in',
      partition: 2 * k,
      outputPartitions: 4,
      deadLetterPartitions: 4,
    }));
  const few = groupMemo(spec, 0, members(3));
  assert.equal(few.partitions, '0 (orders.events-in[0]), 2 (orders.events-in[2]), 4 (orders.events-in[4])');
  assert.equal(groupMemo(spec, 0, members(MEMO_MEMBERS)).partitions.includes('more'), false);
  const many = groupMemo(spec, 0, members(128));
  assert.ok(JSON.stringify(many).length < 2048, `${JSON.stringify(many).length} bytes`);
  assert.match(
    many.partitions,
    /^0 \(orders\.events-in\[0\]\), .*, 30 \(orders\.events-in\[30\]\), and 112 more \(128 at start; the status query lists them all\)$/,
  );
  assert.deepEqual(
    { ...many, partitions: '' },
    { pipeline: 'p1', group: 0, partitions: '', kafkaSink: 'out', tables: COMPARE_TABLE.name },
  );
});

import { securityHint } from '../src/connections';

test('a certificate that does not name the host: the hint names a server-name setting only where the service has one (Kafka, Temporal; not MySQL)', () => {
  const altname = new Error(
    "Hostname/IP does not match certificate's altnames: Host: db. is not in the cert's altnames",
  );
  assert.match(securityHint(altname, 'ONCEFLOW_KAFKA_SSL')!, /or set ONCEFLOW_KAFKA_SSL_SERVER_NAME$/);
  assert.match(securityHint(altname, 'ONCEFLOW_TEMPORAL_TLS')!, /or set ONCEFLOW_TEMPORAL_TLS_SERVER_NAME$/);
  const mysql = securityHint(altname, 'ONCEFLOW_MYSQL_SSL')!;
  assert.match(mysql, /does not name the host connected to .* connect by a name it lists$/);
  assert.doesNotMatch(mysql, /SERVER_NAME/);
});

import { encodeProduce, type ProduceArgs } from '../src/kafka/internals/produce-request';

test("our transactions' Produce request body is kafkajs's, byte for byte", async () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports, @typescript-eslint/no-var-requires
  const kafkajsV3 = require('kafkajs/src/protocol/requests/produce/v3/request');
  const now = Date.now;
  Date.now = () => 1_700_000_000_123;
  try {
    const big = Buffer.alloc(20_000, 7);
    const many = Array.from({ length: 10_000 }, (_, i) => ({ key: `k-${i}`, value: `v${'x'.repeat(i % 300)}` }));
    const cases: ProduceArgs[] = [
      {
        transactionalId: 'onceflow-p-0',
        acks: -1,
        timeout: 30000,
        producerId: '123456789012',
        producerEpoch: 7,
        topicData: [
          {
            topic: 'out',
            partitions: [
              { partition: 0, firstSequence: 5, messages: many },
              {
                partition: 3,
                firstSequence: 0,
                messages: [
                  { key: null, value: 'ünïcødé ✓' },
                  { key: Buffer.from([0, 1, 2]), value: null },
                  { value: big, headers: { a: 'x', b: Buffer.from('y'), c: ['1', '22'] } },
                ],
              },
            ],
          },
          {
            topic: 'dead-letters-ä',
            partitions: [{ partition: 1, firstSequence: 2_000_000_000, messages: many.slice(0, 3) }],
          },
        ],
      },
      {
        // Timestamps carried (a delta past 2^31 ms; one record without: now), no transaction.
        transactionalId: null,
        acks: 1,
        timeout: 5000,
        topicData: [
          {
            topic: 't',
            partitions: [
              {
                partition: 2,
                messages: [
                  { key: 'a', value: 'b', timestamp: '1700000000000' },
                  { key: 'c', value: 'd', timestamp: 1000000000000 },
                  { key: 'e', value: 'f' },
                  { key: 'g', value: 'h', timestamp: '1800000000000' },
                ],
              },
            ],
          },
        ],
      },
    ];
    for (const args of cases) {
      const theirs: Buffer = (await kafkajsV3(args).encode()).buffer;
      const ours = encodeProduce(args);
      assert.equal(ours.length, theirs.length);
      assert.ok(ours.equals(theirs), `first difference at byte ${ours.findIndex((b, i) => b !== theirs[i])}`);
    }
  } finally {
    Date.now = now;
  }
});

import { nextRequest } from '../src/activities/kafka-side';

test('an epoch is cut into requests within the per-partition and per-request limits, every record once, in order', () => {
  const msg = (partition: number, n: number) => ({ key: `k${n}`, value: 'v'.repeat(n % 50), partition });
  const all = Array.from({ length: 3000 }, (_, i) => ({ topic: i % 7 === 0 ? 'dl' : 'out', msg: msg(i % 5, i) }));
  all.splice(100, 0, { topic: 'out', msg: { key: 'huge', value: 'x'.repeat(5000), partition: 1 } });
  const limits = { partitionBytes: 2000, requestBytes: 6000 };
  const size = (m: { key: string; value: string }) => 64 + m.key.length + m.value.length;
  const seen: typeof all = [];
  let requests = 0;
  for (let i = 0; i < all.length; requests++) {
    const { topics, next } = nextRequest(all, i, limits);
    assert.ok(next > i, 'each request takes at least one record');
    const taken = all.slice(i, next);
    i = next;
    for (const [topic, msgs] of topics)
      assert.deepEqual(
        msgs,
        taken.filter((x) => x.topic === topic).map((x) => x.msg),
      );
    seen.push(...taken);
    // A record over a limit goes alone: alone in its request past requestBytes, alone in its
    // partition's batch past partitionBytes (the 5,000-byte one).
    const total = taken.reduce((a, x) => a + size(x.msg), 0);
    assert.ok(total <= limits.requestBytes || taken.length === 1, `request ${requests}: ${total} bytes`);
    const perPartition = new Map<string, { bytes: number; records: number }>();
    for (const x of taken) {
      const k = `${x.topic}/${x.msg.partition}`;
      const p = perPartition.get(k) ?? perPartition.set(k, { bytes: 0, records: 0 }).get(k)!;
      p.bytes += size(x.msg);
      p.records++;
    }
    for (const [k, p] of perPartition)
      assert.ok(p.bytes <= limits.partitionBytes || p.records === 1, `request ${requests}, ${k}: ${p.bytes} bytes`);
  }
  assert.equal(seen.length, all.length);
  assert.deepEqual(seen, all);
  assert.ok(requests > all.reduce((a, x) => a + size(x.msg), 0) / limits.requestBytes, 'the request limit cut');
});

import { CompleteAsyncError } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DecidedCommits, completeThenCommit } from '../src/activities/decided';
import type { GroupCommitArgs, GroupCommitResult } from '../src/protocol';

/** The worker's client as an activity sees it, with only what completeThenCommit asks of it. */
const fakeClient = (complete: () => Promise<void>) =>
  ({ activity: { complete }, withAbortSignal: (_: AbortSignal, fn: () => unknown) => fn() }) as unknown as Client;

test('commit on decision: an epoch commits only once the server took the result; its outcome is taken once; a refused completion commits nothing', async () => {
  const committed: GroupCommitResult = { kafka: 'committed', mysql: 'committed' };
  const decided = { prepared: { xid: 'g#b', groupEpoch: 3 } } as unknown as GroupCommitArgs;
  const result = { kind: 'prepared' };
  /** Runs completeThenCommit in an activity whose client's complete() does `complete`. */
  const end = (complete: (() => Promise<void>) | undefined, commits: DecidedCommits, started: string[]) => {
    const client = complete ? fakeClient(complete) : undefined;
    const env = new MockActivityEnvironment({}, client ? { client } : {});
    return env.run(() =>
      completeThenCommit(
        result,
        decided,
        commits,
        async (a) => {
          started.push(a.prepared.xid);
          return committed;
        },
        () => undefined,
      ),
    );
  };

  // Taken by the server: the activity ends completed-async, the commit runs, its outcome is taken once.
  let commits = new DecidedCommits();
  let started: string[] = [];
  await assert.rejects(
    end(async () => void started.push('completed'), commits, started),
    (e) => e instanceof CompleteAsyncError,
  );
  assert.deepEqual(started, ['completed', 'g#b'], 'the commit starts after the server took the result');
  assert.deepEqual(await commits.take('g#b'), committed);
  assert.equal(await commits.take('g#b'), undefined, 'taken once');

  // Refused (this attempt timed out), or no client (a replay or mock worker): the result goes back
  // to the worker, nothing is committed.
  for (const complete of [
    async () => {
      throw new Error('NOT_FOUND: invalid activityID or activity already timed out');
    },
    undefined,
  ]) {
    commits = new DecidedCommits();
    started = [];
    assert.equal(await end(complete, commits, started), result);
    assert.deepEqual(started, []);
    assert.equal(await commits.take('g#b'), undefined);
  }

  // Nothing decided (an empty epoch): the result goes back as it is, the client is not asked.
  let asked = false;
  const env = new MockActivityEnvironment({}, { client: fakeClient(async () => void (asked = true)) });
  assert.equal(
    await env.run(() =>
      completeThenCommit(
        result,
        undefined,
        new DecidedCommits(),
        async () => committed,
        () => undefined,
      ),
    ),
    result,
  );
  assert.equal(asked, false);

  // A failed early commit: told, and nothing to take (the ordered commit does it); drain waits for running ones.
  commits = new DecidedCommits();
  const failures: unknown[] = [];
  commits.start(
    'x#1',
    async () => Promise.reject(new Error('broker gone')),
    (e) => failures.push(e),
  );
  let finish!: () => void;
  commits.start(
    'x#2',
    () => new Promise((res) => (finish = () => res(committed))),
    () => undefined,
  );
  assert.equal(await commits.take('x#1'), undefined);
  assert.equal(failures.length, 1);
  let drained = false;
  const draining = commits.drain().then(() => (drained = true));
  await new Promise((r) => setImmediate(r));
  assert.equal(drained, false, 'drain waits for the running commit');
  finish();
  await draining;
  assert.deepEqual(await commits.take('x#2'), committed);
});
