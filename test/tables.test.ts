/**
 * Table modes (docs/design.md §6.16) on the real services: one pipeline with a table per mode —
 * accumulate, replace (last write wins), newest (greater version wins) and ignore (first write
 * wins) — fed from three source partitions that all write the same keys, with each key's
 * versions shuffled across the partitions (so they arrive out of order) and, for some keys, a
 * later record of the same partition repeating the greatest version (equal keeps the row there).
 * Run staged, direct and as one partition group (whose epochs combine the rows of all three
 * partitions in one batch). Each table is checked against the input directly and by `verify`;
 * then rows are changed behind the pipeline's back and verify must fail, naming each table.
 * The newest-wins SQL is also run against MariaDB directly, row by row.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RowDataPacket } from 'mysql2/promise';
import { Kafka, logLevel } from 'kafkajs';
import { controlPipeline, startPipeline } from '../src/client';
import { kafkaClientConfig } from '../src/kafka/client-config';
import { detectDialect, inLocalTransaction, quoteIdent, upsertSql } from '../src/mysql/sink';
import {
  applyStaged,
  ensureStagedTable,
  ensureStageTable,
  pendingEpochs,
  STAGE_ROWS_TABLE,
  stageRows,
  stageTableName,
} from '../src/mysql/stage';
import { definePipeline } from '../src/schema/pipeline';
import type { PipelineSpec, TableSpec } from '../src/spec';
import { TransformRegistry, type Transform } from '../src/transforms/registry';
import { verifyPipeline } from '../src/verify';
import { createOnceflowWorker } from '../src/worker';
import { prng, produceRecords, resetPipeline } from '../examples/flink-compare/scenario';
import { bundle, openDeps, quietRuntime, uniqueName, type Deps } from './support/env';
import { failedChecks } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

const PARTITIONS = 3;
const KEYS = 6;
const ROUNDS = 50;

interface Rec {
  k: string;
  val: string;
  v: number;
  n: number;
  partition: number;
}

/** The tables of pipeline `name`, one per mode, keyed by k. */
function tablesOf(name: string): Record<'sum' | 'last' | 'newest' | 'first', TableSpec> {
  const base = (suffix: string, onDuplicate: TableSpec['onDuplicate']): TableSpec => ({
    name: `${name.replace(/[^a-z0-9]/g, '_')}_${suffix}`,
    columns: ['k', 'val', 'v', 'n'],
    onDuplicate,
    create: {
      columns: { k: 'VARCHAR(16) NOT NULL', val: 'VARCHAR(32) NOT NULL', v: 'BIGINT NOT NULL', n: 'BIGINT NOT NULL' },
      primaryKey: ['k'],
    },
  });
  return {
    sum: base('sum', { kind: 'accumulate', columns: ['n'] }),
    last: base('last', { kind: 'replace', columns: ['val', 'v', 'n'] }),
    newest: base('new', { kind: 'newest', version: 'v', columns: ['val', 'n'] }),
    first: base('first', { kind: 'ignore' }),
  };
}

/** Every record becomes one output and one row in each table (options.tables: the table names). */
const tablesTransform: Transform = {
  map(record, ctx) {
    const r = JSON.parse(String(record.value)) as Rec;
    const values = { k: r.k, val: r.val, v: r.v, n: r.n };
    return {
      kafka: [{ key: r.k, value: String(record.value) }],
      mysql: (ctx.options.tables as string[]).map((table) => ({ table, values })),
    };
  },
};

/**
 * Records in produce order, record i in partition i mod 3: random keys, each key's versions a
 * shuffle of its own, then a round in which each partition repeats (with another val) the
 * greatest version of a key whose greatest version it holds.
 */
function makeRecords(seed: number): Rec[] {
  const rnd = prng(seed);
  const versions = new Map<string, number[]>();
  for (let k = 0; k < KEYS; k++) {
    const vs = Array.from({ length: ROUNDS * PARTITIONS }, (_, i) => i + 1);
    for (let i = vs.length - 1; i > 0; i--) {
      const j = Math.floor(rnd() * (i + 1));
      [vs[i], vs[j]] = [vs[j]!, vs[i]!];
    }
    versions.set(`k${k}`, vs);
  }
  const out: Rec[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (let p = 0; p < PARTITIONS; p++) {
      const k = `k${Math.floor(rnd() * KEYS)}`;
      out.push({ k, val: `p${p}-r${r}`, v: versions.get(k)!.pop()!, n: 1 + Math.floor(rnd() * 5), partition: p });
    }
  }
  for (let p = 0; p < PARTITIONS; p++) {
    const best = [...byKey(out)]
      .map(([, rs]) => rs.reduce((a, b) => (b.v > a.v ? b : a)))
      .find((b) => b.partition === p);
    out.push(best ? { ...best, val: `p${p}-tie`, n: 1 } : { k: 'k0', val: `p${p}-low`, v: 0, n: 1, partition: p });
  }
  return out;
}

function groupBy<K>(recs: Rec[], by: (r: Rec) => K): Map<K, Rec[]> {
  const m = new Map<K, Rec[]>();
  for (const r of recs) (m.get(by(r)) ?? m.set(by(r), []).get(by(r))!).push(r);
  return m;
}
const byKey = (recs: Rec[]) => groupBy(recs, (r) => r.k);
/** A key's records per source partition, each in record order. */
const perPartition = (recs: Rec[]) => [...groupBy(recs, (r) => r.partition).values()];

async function produce(topic: string, recs: Rec[]): Promise<void> {
  const kafka = new Kafka({
    ...kafkaClientConfig(deps.settings.kafka, 'onceflow-tables-input'),
    logLevel: logLevel.ERROR,
  });
  recs.forEach((r, i) => assert.equal(r.partition, i % PARTITIONS));
  await produceRecords(
    kafka,
    topic,
    PARTITIONS,
    recs.map((r) => ({ key: r.k, value: JSON.stringify(r) })),
  );
}

async function tableRows(t: TableSpec): Promise<Map<string, { val: string; v: number; n: number }>> {
  const [rows] = await deps.pool.query<RowDataPacket[]>(`SELECT k, val, v, n FROM ${quoteIdent(t.name)}`);
  return new Map(rows.map((r) => [String(r.k), { val: String(r.val), v: Number(r.v), n: Number(r.n) }]));
}

/** Checks each table against the input, independently of verify. */
async function checkAgainstInput(t: ReturnType<typeof tablesOf>, recs: Rec[]): Promise<void> {
  const [sum, last, newest, first] = await Promise.all([
    tableRows(t.sum),
    tableRows(t.last),
    tableRows(t.newest),
    tableRows(t.first),
  ]);
  for (const [k, rs] of byKey(recs)) {
    assert.equal(
      sum.get(k)?.n,
      rs.reduce((a, r) => a + r.n, 0),
      `accumulate: ${k}`,
    );
    // Newest: the greatest version, and of equal ones the first (the tie record comes later in the same partition).
    const max = Math.max(...rs.map((r) => r.v));
    const winner = rs.find((r) => r.v === max)!;
    assert.deepEqual(newest.get(k), { val: winner.val, v: winner.v, n: winner.n }, `newest: ${k}`);
    const lasts = perPartition(rs).map((p) => p[p.length - 1]!.val);
    assert.ok(
      lasts.includes(last.get(k)!.val),
      `replace: ${k} is ${last.get(k)!.val}, one of the partitions' last records ${lasts.join(', ')}`,
    );
    const firsts = perPartition(rs).map((p) => p[0]!.val);
    assert.ok(
      firsts.includes(first.get(k)!.val),
      `ignore: ${k} is ${first.get(k)!.val}, one of the partitions' first records ${firsts.join(', ')}`,
    );
  }
  assert.equal(sum.size, byKey(recs).size);
}

async function runPipelines(variants: { label: string; mode: 'staged' | 'direct'; parallelism?: number }[]) {
  const taskQueue = uniqueName('tq-tables');
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue,
    transforms: new TransformRegistry().register('tables', tablesTransform),
    worker: { workflowBundle: bundle() },
  });
  const running = w.run();
  try {
    const runs = await Promise.all(
      variants.map(async (variant, i) => {
        const name = uniqueName(`tables-${variant.label}`);
        const tables = tablesOf(name);
        const spec: PipelineSpec = definePipeline({
          name,
          source: { topic: `${name}.in` },
          transform: 'tables',
          transformOptions: { tables: Object.values(tables).map((t) => t.name) },
          kafkaSink: { topic: `${name}.out` },
          mysqlSink: { tables: Object.values(tables), mode: variant.mode },
          epoch: { maxRecords: 15, maxWaitMs: 300 },
          ...(variant.parallelism ? { parallelism: variant.parallelism } : {}),
        });
        await resetPipeline(deps.admin, deps.pool, spec, PARTITIONS);
        const recs = makeRecords(31 + i);
        await produce(spec.source.topic, recs);
        const handle = await startPipeline(deps.client, spec, taskQueue);
        await controlPipeline(deps.client, spec.name, 'drain');
        await handle.result();
        return { variant, spec, tables, recs };
      }),
    );
    return runs;
  } finally {
    w.shutdown();
    await running;
  }
}

const verifyRun = (spec: PipelineSpec) =>
  verifyPipeline(
    {
      cluster: deps.cluster,
      admin: deps.admin,
      pool: deps.pool,
      transforms: new TransformRegistry().register('tables', tablesTransform),
    },
    spec,
  );

test(
  'each table mode with three source partitions writing the same keys, staged, direct and grouped: the tables follow their rule and verify passes; a changed row fails verify',
  { timeout: 180_000 },
  async () => {
    const runs = await runPipelines([
      { label: 'staged', mode: 'staged' },
      { label: 'direct', mode: 'direct' },
      { label: 'group', mode: 'staged', parallelism: 1 },
    ]);
    for (const { variant, spec, tables, recs } of runs) {
      await checkAgainstInput(tables, recs);
      const report = await verifyRun(spec);
      assert.ok(report.ok, `${variant.label}: ${failedChecks(report)}`);
      assert.equal(report.totals.sourceRecords, recs.length);
      assert.equal(report.totals.deadLetters, 0);
    }

    // Tampering: in each table, one row becomes a value the input could have produced, but not
    // under the table's rule and any order of commits.
    const { spec, tables, recs } = runs[0]!;
    const keyed = byKey(recs);
    const [k, rs] = [...keyed].find(
      ([, rs]) => new Set(rs.map((r) => r.partition)).size >= 2 && rs.length >= PARTITIONS * 2,
    )!;
    const lastOf = new Set(perPartition(rs).map((p) => p[p.length - 1]!.val));
    const firstOf = new Set(perPartition(rs).map((p) => p[0]!.val));
    const notLast = rs.find((r) => !lastOf.has(r.val))!;
    const notFirst = rs.find((r) => !firstOf.has(r.val))!;
    const max = Math.max(...rs.map((r) => r.v));
    const older = rs.filter((r) => r.v < max).sort((a, b) => b.v - a.v)[0]!;
    const set = (t: TableSpec, r: Partial<Rec>) =>
      deps.pool.query(
        `UPDATE ${quoteIdent(t.name)} SET ${Object.keys(r)
          .map((c) => `${quoteIdent(c)} = ?`)
          .join(', ')} WHERE k = ?`,
        [...Object.values(r), k],
      );
    await deps.pool.query(`UPDATE ${quoteIdent(tables.sum.name)} SET n = n + 1 WHERE k = ?`, [k]);
    await set(tables.last, { val: notLast.val, v: notLast.v, n: notLast.n });
    await set(tables.newest, { val: older.val, v: older.v, n: older.n });
    await set(tables.first, { val: notFirst.val, v: notFirst.v, n: notFirst.n });
    const tampered = await verifyRun(spec);
    assert.equal(tampered.ok, false);
    const failed = tampered.checks.filter((c) => !c.ok);
    assert.deepEqual(
      failed.map((c) => c.name),
      ['MySQL tables equal the rows applied once'],
      failedChecks(tampered),
    );
    for (const t of Object.values(tables))
      assert.match(failed[0]!.detail, new RegExp(`${t.name}: row \\["${k}"\\] is`), failed[0]!.detail);
  },
);

test('newest-wins SQL on MariaDB: a greater version replaces every column, an equal or smaller one changes nothing, a NULL version in the table counts as oldest', async () => {
  const dialect = await detectDialect(deps.pool);
  const name = uniqueName('newest_sql').replace(/[^a-z0-9]/g, '_');
  const t: TableSpec = {
    name,
    columns: ['k', 'val', 'v'],
    onDuplicate: { kind: 'newest', version: 'v', columns: ['val'] },
  };
  await deps.pool.query(`CREATE TABLE ${quoteIdent(name)} (k VARCHAR(8) PRIMARY KEY, val VARCHAR(16), v BIGINT NULL)`);
  try {
    const write = async (...rows: [string, string, number | null][]) => {
      await deps.pool.query(upsertSql(t, rows.length, dialect), rows.flat());
      const [r] = await deps.pool.query<RowDataPacket[]>(`SELECT k, val, v FROM ${quoteIdent(name)} ORDER BY k`);
      return r.map((x) => [x.k, x.val, x.v === null ? null : Number(x.v)]);
    };
    assert.deepEqual(await write(['a', 'five', 5]), [['a', 'five', 5]]);
    assert.deepEqual(await write(['a', 'three', 3]), [['a', 'five', 5]], 'a smaller version changes nothing');
    assert.deepEqual(await write(['a', 'five again', 5]), [['a', 'five', 5]], 'an equal version keeps the row there');
    assert.deepEqual(
      await write(['a', 'seven', 7]),
      [['a', 'seven', 7]],
      'a greater version replaces val and v (v assigned after val saw the old v)',
    );
    // Several rows of one statement apply in order, each against the row the previous one left.
    assert.deepEqual(await write(['a', 'nine', 9], ['a', 'eight', 8], ['b', 'b1', 1]), [
      ['a', 'nine', 9],
      ['b', 'b1', 1],
    ]);
    await deps.pool.query(`UPDATE ${quoteIdent(name)} SET v = NULL WHERE k = 'b'`);
    assert.deepEqual(
      await write(['b', 'b0', 0]),
      [
        ['a', 'nine', 9],
        ['b', 'b0', 0],
      ],
      'a NULL version in the table is older than any',
    );
  } finally {
    await deps.pool.query(`DROP TABLE IF EXISTS ${quoteIdent(name)}`);
  }
});

test('staged apply on MariaDB: rows staged encoded are upserted once, from memory or read back, in one or several bodies; an epoch staged row by row by the version before is applied too', async () => {
  const dialect = await detectDialect(deps.pool);
  const name = uniqueName('staged_sql').replace(/[^a-z0-9]/g, '_');
  const t: TableSpec = { name, columns: ['k', 'n'], onDuplicate: { kind: 'accumulate', columns: ['n'] } };
  const tables = new Map([[name, t]]);
  const pipeline = name;
  await deps.pool.query(`CREATE TABLE ${quoteIdent(name)} (k VARCHAR(8) PRIMARY KEY, n BIGINT NOT NULL)`);
  await ensureStagedTable(deps.pool);
  const rowsOf = async () => {
    const [r] = await deps.pool.query<RowDataPacket[]>(`SELECT k, n FROM ${quoteIdent(name)} ORDER BY k`);
    return r.map((x) => [x.k, Number(x.n)]);
  };
  const encoded = async () => {
    const [r] = await deps.pool.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS c FROM ${STAGE_ROWS_TABLE} WHERE pipeline = ?`,
      [pipeline],
    );
    return Number(r[0]!.c);
  };
  const stage = async (epoch: number, ops: [string, number][]) =>
    inLocalTransaction(deps.pool, (conn) =>
      stageRows(
        conn,
        { pipeline, partition: 0, epoch },
        ops.map(([k, n]) => ({ table: name, values: { k, n } })),
        tables,
      ),
    );
  try {
    // Epoch 0 read back from the table (another worker commits it); same keys combined on the way in.
    await stage(0, [
      ['a', 1],
      ['b', 2],
      ['a', 3],
    ]);
    assert.equal(await encoded(), 1);
    assert.deepEqual(await pendingEpochs(deps.pool, pipeline), [{ partition: 0, epoch: 0 }]);
    assert.equal(await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 0 }, [t], dialect), true);
    assert.deepEqual(await rowsOf(), [
      ['a', 4],
      ['b', 2],
    ]);
    assert.equal(await encoded(), 0, 'the encoded copy goes with the apply');
    assert.equal(await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 0 }, [t], dialect), false, 'once');
    assert.deepEqual(await rowsOf(), [
      ['a', 4],
      ['b', 2],
    ]);
    // Epoch 1 from memory: the rows the prepare kept, the encoded copy deleted all the same.
    const kept = await stage(1, [['c', 5]]);
    assert.equal(await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 1 }, [t], dialect, kept), true);
    assert.equal(await encoded(), 0);
    assert.deepEqual(await rowsOf(), [
      ['a', 4],
      ['b', 2],
      ['c', 5],
    ]);
    // Epoch 2 as the version before staged it: a row per row in onceflow_stage_<table>, then the claim.
    await ensureStageTable(deps.pool, t);
    await deps.pool.query(
      `INSERT INTO ${quoteIdent(stageTableName(name))} (onceflow_pipeline, onceflow_partition, onceflow_epoch, onceflow_seq, k, n) VALUES (?, 0, 2, 0, 'a', 10), (?, 0, 2, 1, 'd', 1)`,
      [pipeline, pipeline],
    );
    await deps.pool.query(`INSERT INTO onceflow_staged (pipeline, source_partition, epoch) VALUES (?, 0, 2)`, [
      pipeline,
    ]);
    assert.equal(await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 2 }, [t], dialect), true);
    assert.deepEqual(await rowsOf(), [
      ['a', 14],
      ['b', 2],
      ['c', 5],
      ['d', 1],
    ]);
    const [left] = await deps.pool.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS c FROM ${quoteIdent(stageTableName(name))} WHERE onceflow_pipeline = ?`,
      [pipeline],
    );
    assert.equal(Number(left[0]!.c), 0);
    assert.deepEqual(await pendingEpochs(deps.pool, pipeline), []);

    // Epochs 3 (read back) and 4 (from memory) of several bodies each (a statement per body).
    const many = (p: string) => Array.from({ length: 90_000 }, (_, i): [string, number] => [`${p}${i}`, 1]);
    await stage(3, many('m'));
    assert.ok((await encoded()) >= 2, `${await encoded()} bodies`);
    const kept4 = await stage(4, many('q'));
    assert.ok(kept4.length >= 2, `${kept4.length} bodies`);
    assert.equal(await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 3 }, [t], dialect), true);
    assert.equal(await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 4 }, [t], dialect, kept4), true);
    assert.equal(
      await applyStaged(deps.pool, { pipeline, partition: 0, epoch: 4 }, [t], dialect, kept4),
      false,
      'once',
    );
    const [sums] = await deps.pool.query<RowDataPacket[]>(
      `SELECT LEFT(k, 1) AS p, COUNT(*) AS c, SUM(n) AS s FROM ${quoteIdent(name)} WHERE k LIKE 'm%' OR k LIKE 'q%' GROUP BY LEFT(k, 1) ORDER BY p`,
    );
    assert.deepEqual(
      sums.map((r) => [r.p, Number(r.c), Number(r.s)]),
      [
        ['m', 90_000, 90_000],
        ['q', 90_000, 90_000],
      ],
    );
    assert.equal(await encoded(), 0);
    assert.deepEqual(await pendingEpochs(deps.pool, pipeline), []);
  } finally {
    await deps.pool.query(`DROP TABLE IF EXISTS ${quoteIdent(name)}, ${quoteIdent(stageTableName(name))}`);
    for (const x of ['onceflow_staged', STAGE_ROWS_TABLE])
      await deps.pool.query(`DELETE FROM ${x} WHERE pipeline = ?`, [pipeline]);
  }
});
