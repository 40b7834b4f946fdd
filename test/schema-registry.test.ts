/**
 * The schema-registry serde (src/serde/schema-registry.ts).
 *
 * - Against a real registry (Apicurio Registry, Confluent-compatible API, started by
 *   scripts/schema-registry.sh) and the real services: Avro orders in, Avro events out, through
 *   an in-process worker; records that are not Avro, name an unknown schema id, are truncated,
 *   are rejected by the transform or do not fit the output schema are dead-lettered with their
 *   reasons; verifyPipeline (which re-decodes and re-encodes every record) passes, and the
 *   read_committed output decodes to the expected events.
 * - The wrapper's error paths with a fake registry: what is the record's fault (dead-letter),
 *   what is the registry's (retried, then SchemaRegistryUnavailable), what is configuration.
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SchemaRegistry, SchemaType } from '@kafkajs/confluent-schema-registry';
import { Kafka, logLevel } from 'kafkajs';
import type { RowDataPacket } from 'mysql2';
import { controlPipeline, startPipeline } from '../src/client';
import { ConfigError } from '../src/errors';
import { kafkaClientConfig } from '../src/kafka/client-config';
import { ISOLATION } from '../src/kafka/internals';
import {
  withSchemaRegistry,
  SchemaRegistryUnavailable,
  UndecodableRecord,
  type SchemaRegistryClient,
  type SchemaRegistryOptions,
} from '../src/serde/schema-registry';
import { definePipeline } from '../src/schema/pipeline';
import { TransformRegistry, type SourceRecord, type TransformContext } from '../src/transforms/registry';
import { readAll, verifyPipeline } from '../src/verify';
import { createOnceflowWorker } from '../src/worker';
import { createTopic } from '../examples/flink-compare/scenario';
import { openDeps, quietRuntime, uniqueName, type Deps } from './support/env';
import { failedChecks } from './support/pipeline';

const ROOT = join(__dirname, '..');
const exec = promisify(execFile);

interface Order {
  id: string;
  customer: string;
  items: { sku: string; qty: number; price: number }[];
  status: string;
}
interface OrderEvent {
  order: string;
  customer: string;
  status: string;
  items: number;
  totalCents: number;
}

const ORDER_SCHEMA = {
  type: 'record',
  name: 'Order',
  namespace: 'onceflow.test',
  fields: [
    { name: 'id', type: 'string' },
    { name: 'customer', type: 'string' },
    {
      name: 'items',
      type: {
        type: 'array',
        items: {
          type: 'record',
          name: 'Item',
          fields: [
            { name: 'sku', type: 'string' },
            { name: 'qty', type: 'int' },
            { name: 'price', type: 'double' },
          ],
        },
      },
    },
    { name: 'status', type: 'string' },
  ],
};
// The output's status is an enum: an order whose status is not one of them does not fit.
const EVENT_SCHEMA = {
  type: 'record',
  name: 'OrderEvent',
  namespace: 'onceflow.test',
  fields: [
    { name: 'order', type: 'string' },
    { name: 'customer', type: 'string' },
    { name: 'status', type: { type: 'enum', name: 'Status', symbols: ['placed', 'paid', 'shipped', 'cancelled'] } },
    { name: 'items', type: 'int' },
    { name: 'totalCents', type: 'long' },
  ],
};

const OUT_PARTITIONS = 2;
const partitionOf = (customer: string) => createHash('sha1').update(customer).digest().readUInt32BE(0) % OUT_PARTITIONS;
const centsOf = (o: Order) => o.items.reduce((sum, it) => sum + it.qty * Math.round(it.price * 100), 0);

/** An orders-like transform on decoded Avro orders; its events are encoded with the output schema. */
const ordersTransform = (registry: SchemaRegistryClient, table: string, outSubject: string) =>
  withSchemaRegistry<Order, OrderEvent>(
    registry,
    {
      map(record) {
        const order = record.value;
        if (!order) throw new Error('an order without a value (tombstone)');
        if (order.items.length === 0) throw new Error(`order ${order.id}: no items`);
        const totalCents = centsOf(order);
        return {
          kafka: [
            {
              key: order.customer,
              value: {
                order: order.id,
                customer: order.customer,
                status: order.status,
                items: order.items.length,
                totalCents,
              },
              partition: partitionOf(order.customer),
            },
          ],
          mysql: [{ table, values: { customer: order.customer, orders: 1, revenue_cents: totalCents } }],
        };
      },
    },
    { outputValueSchema: { subject: outSubject, version: 1 } },
  );

describe('against a real schema registry (Apicurio, Confluent-compatible API)', () => {
  let deps: Deps;
  let url: string;
  let startedHere = false;
  before(async () => {
    quietRuntime();
    const script = join(ROOT, 'scripts', 'schema-registry.sh');
    startedHere = await exec('bash', [script, 'status']).then(
      () => false,
      () => true,
    );
    // Idempotent: starts the registry only if it is not running (downloads it the first time).
    const up = await exec('bash', [script, 'up'], { timeout: 600_000 });
    url = up.stdout.trim().split('\n').pop()!;
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/apis\/ccompat\/v7$/);
    deps = await openDeps();
  });
  after(async () => {
    await deps?.close();
    // Leave a registry someone else started; stop the one this test started.
    if (startedHere) await exec('bash', [join(ROOT, 'scripts', 'schema-registry.sh'), 'down']);
  });

  test(
    'Avro orders → Avro events through a pipeline: undecodable and unfit records dead-lettered, verify passes, output decodes',
    { timeout: 180_000 },
    async () => {
      const name = uniqueName('sr');
      const table = `t_${name.replace(/[^a-z0-9]/g, '_')}_totals`;
      const registry = new SchemaRegistry({ host: url, clientId: 'onceflow-test' });
      const inSubject = `${name}.in-value`;
      const outSubject = `${name}.out-value`;
      const { id: orderSchemaId } = await registry.register(
        { type: SchemaType.AVRO, schema: JSON.stringify(ORDER_SCHEMA) },
        { subject: inSubject },
      );
      const { id: eventSchemaId } = await registry.register(
        { type: SchemaType.AVRO, schema: JSON.stringify(EVENT_SCHEMA) },
        { subject: outSubject },
      );
      assert.notEqual(orderSchemaId, eventSchemaId);

      const spec = definePipeline({
        name,
        source: { topic: `${name}.in` },
        transform: 'orders-avro',
        kafkaSink: { topic: `${name}.out` },
        mysqlSink: {
          tables: [
            {
              name: table,
              columns: ['customer', 'orders', 'revenue_cents'],
              onDuplicate: { kind: 'accumulate', columns: ['orders', 'revenue_cents'] },
              create: {
                columns: {
                  customer: 'VARCHAR(64) NOT NULL',
                  orders: 'BIGINT NOT NULL',
                  revenue_cents: 'BIGINT NOT NULL',
                },
                primaryKey: ['customer'],
              },
            },
          ],
        },
        epoch: { maxRecords: 40, maxWaitMs: 300 },
        // The five bad records are consecutive: three in one epoch of 40, an explicit dead-letter budget.
        deadLetter: { maxRatio: 0.1 },
      });
      await createTopic(deps.admin, spec.source.topic, 2);
      await createTopic(deps.admin, spec.kafkaSink.topic, OUT_PARTITIONS);

      // 120 good orders and five bad records, produced Avro-encoded by the registry client.
      const customers = Array.from({ length: 11 }, (_, i) => `c-${i}`);
      const orders: Order[] = Array.from({ length: 120 }, (_, i) => ({
        id: `o-${i}`,
        customer: customers[(i * 7) % customers.length]!,
        items: Array.from({ length: 1 + (i % 3) }, (_, k) => ({
          sku: `s-${(i + k) % 5}`,
          qty: 1 + ((i + k) % 4),
          price: 1.25 * (1 + ((i * k) % 6)),
        })),
        status: ['placed', 'paid', 'shipped', 'cancelled'][i % 4]!,
      }));
      const good = await Promise.all(
        orders.map(async (o) => ({ key: o.id, value: await registry.encode(orderSchemaId, o) })),
      );
      const sample = good[0]!.value;
      const unknownId = Buffer.from(sample);
      // A producer that used another registry: the bytes name a schema id this registry does not have.
      unknownId.writeInt32BE(987_654_321, 1);
      const bad = [
        {
          key: 'bad-json',
          value: Buffer.from(JSON.stringify(orders[0])),
          reason: /schema registry: cannot decode the record's value: Message encoded with magic byte/,
        },
        { key: 'bad-id', value: unknownId, reason: /schema registry: cannot decode the record's value: .*987654321/ },
        {
          key: 'bad-truncated',
          value: sample.subarray(0, sample.length - 3),
          reason: /schema registry: cannot decode the record's value: truncated buffer/,
        },
        {
          key: 'bad-empty',
          value: await registry.encode(orderSchemaId, { ...orders[1]!, id: 'o-empty', items: [] }),
          reason: /transform failed: order o-empty: no items/,
        },
        {
          key: 'bad-status',
          value: await registry.encode(orderSchemaId, { ...orders[2]!, id: 'o-lost', status: 'lost' }),
          reason: /schema registry: output 0's value does not fit schema \d+: .*lost/,
        },
      ];
      const kafka = new Kafka({
        ...kafkaClientConfig(deps.settings.kafka, 'onceflow-test-input'),
        logLevel: logLevel.ERROR,
      });
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      const input = [...good.slice(0, 60), ...bad, ...good.slice(60)];
      await producer.send({
        topic: spec.source.topic,
        acks: -1,
        messages: input.map((r, i) => ({ key: r.key, value: r.value, partition: i % 2 })),
      });
      await producer.disconnect();

      const transforms = new TransformRegistry().register('orders-avro', ordersTransform(registry, table, outSubject));
      const taskQueue = uniqueName('tq');
      const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
      assert.ok(codePath, 'ONCEFLOW_WORKFLOW_BUNDLE is not set; run with scripts/test.sh');
      const w = await createOnceflowWorker({
        settings: deps.settings,
        taskQueue,
        transforms,
        worker: { workflowBundle: { codePath } },
      });
      const running = w.run();
      try {
        const handle = await startPipeline(deps.client, spec, taskQueue);
        await controlPipeline(deps.client, spec.name, 'drain');
        await handle.result();
      } finally {
        w.shutdown();
        await running;
      }

      // verify maps every source record again — decoding and encoding through the registry —
      // and compares with what the pipeline wrote.
      const report = await verifyPipeline(
        { cluster: deps.cluster, admin: deps.admin, pool: deps.pool, transforms },
        spec,
      );
      assert.ok(report.ok, failedChecks(report));
      assert.equal(report.totals.sourceRecords, 125);
      assert.equal(report.totals.outputs, 120);
      assert.equal(report.totals.deadLetters, 5);

      // The dead letters: the bytes as read, and why.
      const dlqPartitions = (await deps.admin.fetchTopicMetadata({ topics: [spec.deadLetterTopic] })).topics[0]!
        .partitions.length;
      const dead = new Map<string, string>();
      for (let p = 0; p < dlqPartitions; p++) {
        for (const r of await readAll(deps.cluster, spec.deadLetterTopic, p, ISOLATION.READ_COMMITTED))
          dead.set(String(r.key), String(r.headers['onceflow.error']));
      }
      assert.deepEqual([...dead.keys()].sort(), bad.map((b) => b.key).sort());
      for (const b of bad) assert.match(dead.get(b.key)!, b.reason, `dead letter ${b.key}`);

      // The committed output: Avro of the output schema, one event per good order, in its customer's partition.
      const events: OrderEvent[] = [];
      for (let p = 0; p < OUT_PARTITIONS; p++) {
        for (const r of await readAll(deps.cluster, spec.kafkaSink.topic, p, ISOLATION.READ_COMMITTED)) {
          assert.ok(r.value);
          assert.equal(r.value.readUInt32BE(1), eventSchemaId, 'encoded with the output schema');
          const e = { ...((await registry.decode(r.value)) as OrderEvent) };
          assert.equal(String(r.key), e.customer);
          assert.equal(p, partitionOf(e.customer));
          events.push(e);
        }
      }
      const expected = orders.map((o) => ({
        order: o.id,
        customer: o.customer,
        status: o.status,
        items: o.items.length,
        totalCents: centsOf(o),
      }));
      const byOrder = (a: OrderEvent, b: OrderEvent) => a.order.localeCompare(b.order);
      assert.deepEqual(events.sort(byOrder), expected.sort(byOrder));

      const [totals] = await deps.pool.query<RowDataPacket[]>(
        `SELECT SUM(orders) AS orders, SUM(revenue_cents) AS revenue FROM \`${table}\``,
      );
      assert.deepEqual(
        [Number(totals[0]!.orders), Number(totals[0]!.revenue)],
        [120, orders.reduce((s, o) => s + centsOf(o), 0)],
      );
    },
  );
});

// ---------------------------------------------------------------------------------- the wrapper alone

const ctx: TransformContext = { pipeline: 'p', partition: 0, epoch: 0, attempt: 1, options: {} };
const rec = (value: Buffer | null, key: Buffer | null = null): SourceRecord => ({
  topic: 't',
  partition: 0,
  offset: 7,
  key,
  value,
  headers: {},
  timestamp: '0',
});
const httpError = (status: number, message: string) => Object.assign(new Error(message), { status });

/** A registry that "encodes" as JSON after a zero byte, refuses to encode 'bad', and fails as told. */
function fakeRegistry(failures: { decode?: unknown[]; encode?: unknown[]; getSchema?: unknown[] } = {}) {
  const calls = { decode: 0, encode: 0, getSchema: 0 };
  const next = (k: keyof typeof calls) => {
    calls[k]++;
    const f = failures[k]?.shift();
    if (f) throw f;
  };
  const registry: SchemaRegistryClient = {
    async decode(b) {
      next('decode');
      if (b[0] !== 0) throw new Error('Message encoded with magic byte [123], expected [0]');
      return JSON.parse(b.subarray(1).toString()) as unknown;
    },
    async encode(id, v) {
      next('encode');
      if (v === 'bad') throw Object.assign(new Error(`invalid value for schema ${id}`), { paths: [['n']] });
      return Buffer.concat([Buffer.from([0]), Buffer.from(JSON.stringify(v))]);
    },
    async getSchema() {
      next('getSchema');
      return {};
    },
  };
  return { registry, calls };
}
const wire = (v: unknown) => Buffer.concat([Buffer.from([0]), Buffer.from(JSON.stringify(v))]);
const echo = <T>(registry: SchemaRegistryClient, opts: SchemaRegistryOptions = { outputValueSchema: 5 }) =>
  withSchemaRegistry<T, T, unknown>(registry, { map: (r) => ({ kafka: [{ key: 'k', value: r.value }] }) }, opts);

describe('withSchemaRegistry, with a fake registry', () => {
  test('decodes the value, encodes the output with the fixed schema id; tombstones stay null', async () => {
    const { registry } = fakeRegistry();
    const seen: unknown[] = [];
    const t = withSchemaRegistry<{ n: number }, { n: number }>(
      registry,
      {
        map(r) {
          seen.push(r.value, r.key, r.raw.value);
          return { kafka: [{ value: r.value && { n: r.value.n + 1 } }] };
        },
      },
      { outputValueSchema: 5 },
    );
    const out = await t.map(rec(wire({ n: 1 }), Buffer.from('key')), ctx);
    assert.deepEqual(out.kafka, [{ key: null, value: wire({ n: 2 }) }]);
    assert.deepEqual(seen, [{ n: 1 }, Buffer.from('key'), wire({ n: 1 })]);
    assert.deepEqual((await t.map(rec(null), ctx)).kafka, [{ key: null, value: null }]);
  });

  test('bytes not in the wire format, and a schema id the registry does not know (404), are the record’s fault: not retried', async () => {
    const { registry, calls } = fakeRegistry({
      decode: [undefined, httpError(404, "No content with ID '99' was found.")],
    });
    const t = echo(registry);
    await assert.rejects(
      async () => t.map(rec(Buffer.from('{"n":1}')), ctx),
      (e: unknown) =>
        e instanceof UndecodableRecord &&
        /cannot decode the record's value: Message encoded with magic byte/.test(e.message),
    );
    await assert.rejects(
      async () => t.map(rec(wire({ n: 1 })), ctx),
      (e: unknown) => e instanceof UndecodableRecord && /No content with ID '99'/.test(e.message),
    );
    assert.equal(calls.decode, 2);
  });

  test('an unreachable registry is retried, then SchemaRegistryUnavailable (retryable), not UndecodableRecord; a recovered one decodes', async () => {
    const down = fakeRegistry({ decode: [httpError(400, 'connect ECONNREFUSED'), httpError(503, 'unavailable')] });
    const t = echo(down.registry, { outputValueSchema: 5, registryRetries: 1 });
    await assert.rejects(
      async () => t.map(rec(wire({ n: 1 })), ctx),
      (e: unknown) =>
        e instanceof SchemaRegistryUnavailable &&
        e.retryable &&
        /unavailable while decoding the value: unavailable/.test(e.message),
    );
    assert.equal(down.calls.decode, 2);
    const flaky = fakeRegistry({ decode: [httpError(500, 'boom')] });
    assert.deepEqual((await echo(flaky.registry).map(rec(wire({ n: 1 })), ctx)).kafka, [
      { key: 'k', value: wire({ n: 1 }) },
    ]);
    assert.equal(flaky.calls.decode, 2);
  });

  test('an output that does not fit its schema names the path; an object output without an output schema is refused', async () => {
    const { registry } = fakeRegistry();
    await assert.rejects(
      async () => echo(registry).map(rec(wire('bad')), ctx),
      /schema registry: output 0's value does not fit schema 5: invalid value for schema 5 \(at n\)/,
    );
    await assert.rejects(
      async () => echo(registry, {}).map(rec(wire({ n: 1 })), ctx),
      /output 0's value is object, not a string or Buffer, and no output schema is set/,
    );
  });

  test('decodeKey decodes the key; an output schema missing from the registry is a configuration error, checked before decoding', async () => {
    const { registry, calls } = fakeRegistry({ getSchema: [httpError(404, 'Schema 5 not found')] });
    const t = withSchemaRegistry<number, number, { k: string }>(
      registry,
      { map: (r) => ({ kafka: [{ key: r.key?.k ?? null, value: r.value }] }) },
      { outputValueSchema: 5, decodeKey: true },
    );
    await assert.rejects(
      async () => t.map(rec(wire(1), wire({ k: 'a' })), ctx),
      (e: unknown) => e instanceof ConfigError && /outputValueSchema 5 was not found/.test(e.message),
    );
    assert.equal(calls.decode, 0);
    assert.deepEqual((await t.map(rec(wire(1), wire({ k: 'a' })), ctx)).kafka, [{ key: 'a', value: wire(1) }]);
    assert.equal(calls.getSchema, 2, 'a failed check is retried by the next record, a passed one is not repeated');
    await t.map(rec(wire(2), null), ctx);
    assert.equal(calls.getSchema, 2);
  });

  test('refuses "latest" and other unfixed output schemas at definition time', () => {
    const { registry } = fakeRegistry();
    const map = () => ({});
    assert.throws(
      () =>
        withSchemaRegistry(
          registry,
          { map },
          { outputValueSchema: { subject: 's', version: 'latest' as unknown as number } },
        ),
      /version must be a version number .*"latest" would change under a running pipeline/,
    );
    assert.throws(() => withSchemaRegistry(registry, { map }, { outputKeySchema: 0 }), ConfigError);
    assert.throws(
      () => withSchemaRegistry(registry, { map }, { outputValueSchema: { subject: 's', version: 1 } }),
      /needs registry.getRegistryId/,
    );
    assert.throws(() => withSchemaRegistry({} as SchemaRegistryClient, { map }), /needs decode\(buffer\) and encode/);
  });
});
