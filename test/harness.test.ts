/**
 * The harness's own pure logic, in the unit tier: the soak's bounded-state verdicts
 * (tools/chaos/bounds.ts) computed from samples. Tests of the harness import tools/; tests of
 * the product take no product logic from tools/ (what the product knows lives in src/).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { boundedStateChecks, growthJudged } from '../tools/chaos/bounds';
import type { Sample } from '../tools/chaos/campaign';

/** A soak's samples: `n` minutes of 4 partitions, history restarting every 10 samples. */
function soakSamples(n: number, change: (s: Sample, i: number) => Partial<Sample> = () => ({})): Sample[] {
  return Array.from({ length: n }, (_, i) => {
    const s: Sample = {
      atS: 60 * i,
      produced: 39_000 * i,
      committedRecords: 39_000 * i,
      workerRssMb: [250, 240],
      loopDelayP99Ms: [30, 30],
      historyEvents: [0, 1, 2, 3].map((p) => 100 + 300 * ((i + p) % 10)),
      historyBytes: [0, 1, 2, 3].map((p) => 40_000 + 100_000 * ((i + p) % 10)),
      ledgerRows: 400 + (i % 5) * 80,
      stagedRows: 200,
      tableBytes: 300_000,
      progressTopicRecords: 500 * i,
    };
    return { ...s, ...change(s, i) };
  });
}
const failing = (samples: Sample[]) =>
  boundedStateChecks(samples, { partitions: 4, maxRecords: 500 })
    .filter((c) => !c.ok)
    .map((c) => c.name);

test('soak bounds: a steady run passes; each kind of growth fails its own check', () => {
  assert.deepEqual(failing(soakSamples(60)), []);
  assert.deepEqual(failing(soakSamples(60, (_, i) => ({ ledgerRows: 100 + 20 * i }))), [
    'ledger rows within the pruning rule',
  ]);
  assert.deepEqual(failing(soakSamples(60, () => ({ stagedRows: 4001 }))), [
    'staged rows within two epochs per partition',
  ]);
  assert.deepEqual(failing(soakSamples(60, (_, i) => ({ workerRssMb: [250 + 5 * i, 240] }))), [
    'worker RSS does not grow',
  ]);
  assert.deepEqual(failing(soakSamples(60, (_, i) => ({ tableBytes: 300_000 + 20_000 * i }))), [
    'table bytes do not grow',
  ]);
  const neverRestarted = failing(
    soakSamples(60, (s, i) => ({ historyEvents: s.historyEvents.map((e, p) => (p === 2 ? 100 + 200 * i : e)) })),
  );
  assert.deepEqual(neverRestarted, ['every partition workflow continued as new', 'history per run does not grow']);
  // Too short to judge growth (the short soak): only the rule bounds are checked.
  const short = boundedStateChecks(
    soakSamples(20, (_, i) => ({ workerRssMb: [100 + 50 * i, null] })),
    { partitions: 4, maxRecords: 500 },
  );
  assert.deepEqual(
    short.map((c) => c.name),
    ['ledger rows within the pruning rule', 'staged rows within two epochs per partition'],
  );
  assert.equal(growthJudged(soakSamples(20)), false);
  assert.equal(growthJudged(soakSamples(31)), true);
});
