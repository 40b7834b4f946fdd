/**
 * The services' round trips just before a paced run. An epoch's cycle is made of such round trips
 * (a Temporal task, a Kafka transaction, an XA branch); cpuGauge (run.ts) gauges only the CPU, and
 * on this machine the same code's paced cycle grew by 43 % over hours while that gauge stayed
 * put. These say whether the services answered slower, the same work each time.
 */
import type { Connections } from '../../src/connections';
import { createTopicsReady } from '../../src/kafka/topics';
import { percentiles } from './analyze';

export interface ServiceGauge {
  /** a Kafka transaction of one record: begin, send, commit (median ms) */
  kafkaTxnMs: number;
  /**
   * its commit alone (EndTxn, median ms; absent in runs before 2026-12-07 19:00 UTC). The rest is
   * the send, with AddPartitionsToTxn. Until 2026-12-07 21:30 UTC a round sometimes took 300 ms ±
   * 20 %: the transactions follow each other on one transactional id, and when the broker was
   * still writing the previous one's markers it answered AddPartitionsToTxn with
   * CONCURRENT_TRANSACTIONS, which kafkajs retried after its default 300 ms (a probe counting the
   * requests found two AddPartitionsToTxn in every slow round and one in every other). onceflow's
   * epochs never reuse an id back to back; the gauge now retries after 20 ms.
   */
  kafkaCommitMs?: number;
  /** an XA branch of one row on one connection: XA START, INSERT, XA END, XA PREPARE, XA COMMIT (median ms) */
  xaMs: number;
  /** a Temporal workflow start (nothing polls its task queue; terminated after), median ms */
  temporalStartMs: number;
}

/** Measured rounds of each; one round before them is not counted (connections, metadata). */
const ROUNDS = 15;
const GAUGE_TABLE = 'bench_service_gauge';

async function timedRounds(round: (i: number) => Promise<void>): Promise<number> {
  await round(-1);
  const ms: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const t0 = performance.now();
    await round(i);
    ms.push(performance.now() - t0);
  }
  return percentiles(ms).p50;
}

/** `name`: the paced run's, so its topic goes with the run's clean-up. */
export async function serviceGauge(deps: Connections, name: string): Promise<ServiceGauge> {
  const topic = `${name}.gauge`;
  if (!(await createTopicsReady(deps.admin, [{ topic, numPartitions: 1, replicationFactor: -1 }])))
    throw new Error(`service gauge: topic ${topic} has no leader`);
  const producer = deps.kafka.producer({
    transactionalId: `${name}-gauge`,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    // CONCURRENT_TRANSACTIONS (the previous round's markers not yet written) clears in
    // milliseconds; kafkajs's default first retry after 300 ms made such a round 300 ms long.
    retry: { initialRetryTime: 20, retries: 10 },
  });
  await producer.connect();
  let kafkaTxnMs: number;
  const commits: number[] = [];
  try {
    kafkaTxnMs = await timedRounds(async (i) => {
      const tx = await producer.transaction();
      await tx.send({ topic, messages: [{ value: 'g' }] });
      const t0 = performance.now();
      await tx.commit();
      if (i >= 0) commits.push(performance.now() - t0);
    });
  } finally {
    await producer.disconnect();
  }
  const kafkaCommitMs = percentiles(commits).p50;

  await deps.pool.query(
    `CREATE TABLE IF NOT EXISTS ${GAUGE_TABLE} (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB`,
  );
  const conn = await deps.pool.getConnection();
  let xaMs: number;
  let xid = '';
  try {
    xaMs = await timedRounds(async (i) => {
      xid = `'onceflow-bench-gauge-${i + 1}'`;
      await conn.query(`XA START ${xid}`);
      await conn.query(`INSERT INTO ${GAUGE_TABLE} (v) VALUES (?)`, [i]);
      await conn.query(`XA END ${xid}`);
      await conn.query(`XA PREPARE ${xid}`);
      await conn.query(`XA COMMIT ${xid}`);
    });
    conn.release();
  } catch (e) {
    // A round that failed midway leaves no branch behind: ended and rolled back, prepared or not.
    await conn.query(`XA END ${xid}`).catch(() => undefined);
    await conn.query(`XA ROLLBACK ${xid}`).catch(() => undefined);
    conn.destroy();
    throw e;
  } finally {
    await deps.pool.query(`DROP TABLE IF EXISTS ${GAUGE_TABLE}`);
  }

  const started: string[] = [];
  let temporalStartMs: number;
  try {
    temporalStartMs = await timedRounds(async (i) => {
      const workflowId = `${name}-gauge-${i + 1}`;
      await deps.client.workflow.start('benchServiceGauge', { taskQueue: `${name}-gauge`, workflowId });
      started.push(workflowId);
    });
  } finally {
    for (const id of started)
      await deps.client.workflow
        .getHandle(id)
        .terminate('bench: service gauge')
        .catch(() => undefined);
  }
  return { kafkaTxnMs, kafkaCommitMs, xaMs, temporalStartMs };
}
