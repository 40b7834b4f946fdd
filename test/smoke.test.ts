/**
 * Smoke tests of the three real services (issue: foundation).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from '@temporalio/worker';
import type { Consumer } from 'kafkajs';
import { createConnection } from 'mysql2/promise';
import { createTopic } from '../examples/flink-compare/scenario';
import { openDeps, quietRuntime, uniqueName, type Deps } from './support/env';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

test('Temporal: a workflow with one activity completes on the dev server', async () => {
  const taskQueue = uniqueName('smoke');
  const worker = await Worker.create({
    taskQueue,
    workflowsPath: require.resolve('./workflows/smoke'),
    activities: { greet: async (name: string) => `hello ${name}` },
  });
  const result = await worker.runUntil(
    deps.client.workflow.execute('smokeWorkflow', {
      taskQueue,
      workflowId: uniqueName('smoke-wf'),
      args: ['onceflow'],
    }),
  );
  assert.equal(result, 'hello onceflow');
});

async function readValues(consumer: Consumer, topic: string, expected: number, timeoutMs = 20000): Promise<string[]> {
  const seen: string[] = [];
  await consumer.subscribe({ topic, fromBeginning: true });
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  await consumer.run({
    eachMessage: async ({ message }) => {
      seen.push(String(message.value));
      if (seen.length >= expected) done();
    },
  });
  await Promise.race([finished, new Promise((r) => setTimeout(r, timeoutMs).unref())]);
  await consumer.disconnect();
  return seen;
}

test('Kafka: read_committed sees the committed transaction only, read_uncommitted sees both', async () => {
  const topic = uniqueName('smoke-txn');
  await createTopic(deps.admin, topic, 1);
  const producer = deps.kafka.producer({
    transactionalId: uniqueName('smoke-tid'),
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  const t1 = await producer.transaction();
  await t1.send({ topic, messages: [{ value: 'committed' }] });
  await t1.commit();
  const t2 = await producer.transaction();
  await t2.send({ topic, messages: [{ value: 'aborted' }] });
  await t2.abort();
  const t3 = await producer.transaction();
  await t3.send({ topic, messages: [{ value: 'end' }] });
  await t3.commit();
  await producer.disconnect();

  const committed = await readValues(
    deps.kafka.consumer({ groupId: uniqueName('rc'), readUncommitted: false }),
    topic,
    2,
  );
  const uncommitted = await readValues(
    deps.kafka.consumer({ groupId: uniqueName('ru'), readUncommitted: true }),
    topic,
    3,
  );
  assert.deepEqual(committed, ['committed', 'end']);
  assert.deepEqual(uncommitted, ['committed', 'aborted', 'end']);
});

test('MariaDB: XA PREPARE, connection destroyed, XA COMMIT from a new connection, XA RECOVER empty', async () => {
  const { mysql } = deps.settings;
  const table = uniqueName('smoke_xa').replace(/-/g, '_');
  await deps.pool.query(`CREATE TABLE \`${table}\` (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB`);
  const gtrid = uniqueName('smoke-xid');
  const a = await createConnection(mysql);
  await a.query(`XA START '${gtrid}'`);
  await a.query(`INSERT INTO \`${table}\` VALUES (1, 42)`);
  await a.query(`XA END '${gtrid}'`);
  await a.query(`XA PREPARE '${gtrid}'`);
  a.destroy();

  const b = await createConnection(mysql);
  try {
    // The server detaches the branch when it notices the closed session; wait for that.
    let committed = false;
    for (let i = 0; i < 50 && !committed; i++) {
      try {
        await b.query(`XA COMMIT '${gtrid}'`);
        committed = true;
      } catch (e) {
        if ((e as { errno?: number }).errno !== 1397) throw e;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    assert.ok(committed, 'XA COMMIT from a second connection succeeded');
    const [rows] = await b.query(`SELECT v FROM \`${table}\` WHERE id = 1`);
    assert.deepEqual(rows, [{ v: 42 }]);
    const [recover] = await b.query('XA RECOVER');
    const ours = (recover as { data: Buffer | string }[]).filter((r) => String(r.data).startsWith(gtrid));
    assert.equal(ours.length, 0);
  } finally {
    await b.query(`DROP TABLE \`${table}\``);
    await b.end();
  }
});
