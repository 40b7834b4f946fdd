/**
 * The benchmark harness, small: all three measurements (A ProducerPerformance, B at-least-once,
 * C onceflow) and the latency phase produce sane, non-zero figures, and C's run verified
 * exactly once. Speed itself is reported by `npm run bench`, never asserted here.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { markdown, svgChart } from '../tools/bench/report';
import { runBench } from '../tools/bench/run';
import { quietRuntime } from './support/env';

test('npm run bench, small: A, B and C measured, C verified exactly once, report rendered', { timeout: 180_000 }, async () => {
  quietRuntime();
  const r = await runBench({
    records: 4000,
    partitions: 2,
    recordBytes: 200,
    epochSizes: [500],
    directEpochSizes: [500],
    noEagerEpochSizes: [],
    latencyRate: 400,
    latencySeconds: 3,
    perfTransactionMs: 200,
    log: () => undefined,
  });
  const positive = (what: string, x: number) => assert.ok(Number.isFinite(x) && x > 0, `${what} = ${x}`);
  positive('A plain records/s', r.A.plain.recordsPerSec);
  positive('A transactional records/s', r.A.transactional.recordsPerSec);
  positive('B records/s', r.B.recordsPerSec);
  assert.equal(r.B.records, 4000);
  assert.equal(r.C.length, 2);
  const direct = r.C[1]!;
  assert.equal(direct.mysqlMode, 'direct');
  assert.equal(direct.records, 4000);
  assert.ok(direct.verified, `C with direct MySQL writes verified exactly once: ${direct.failedChecks.join('; ')}`);
  const c = r.C[0]!;
  assert.equal(c.mysqlMode, 'staged');
  assert.equal(c.records, 4000);
  positive('C records/s', c.recordsPerSec);
  positive('C/B', c.vsB);
  positive('C/A', c.vsATransactional);
  assert.ok(c.verified, `C verified exactly once: ${c.failedChecks.join('; ')}`);
  assert.ok(c.split.epochs >= 8, `C ran ${c.split.epochs} epochs of at most 500 records`);
  positive('C prepare ms per epoch', c.split.prepareMs);
  positive('C Kafka commit ms per epoch', c.split.kafkaCommitMs);
  positive('C worker CPU', c.cpuMs);
  positive('C worker peak RSS', c.peakRssMb);
  for (const l of r.latency) {
    assert.equal(l.seen, l.records, `${l.engine}: every paced record became visible`);
    assert.ok(l.latencyMs.p50 >= 0 && l.latencyMs.p99 >= l.latencyMs.p50, `${l.engine} latency ${JSON.stringify(l.latencyMs)}`);
  }
  assert.equal(r.latency.find((l) => l.engine === 'C')?.verified, true);
  const md = markdown(r, 'performance.svg');
  assert.match(md, /C onceflow, epoch.maxRecords 500 \|/);
  assert.match(md, /C onceflow, epoch.maxRecords 500, MySQL \*\*direct\*\*/);
  assert.match(svgChart(r), /^<svg/);
});
