/**
 * Bounded state on the real services: the ledger keeps its first row and the last
 * LEDGER_KEEP_EPOCHS epochs per partition (src/mysql/ledger.ts), the progress topic is
 * compacted, and with old rows gone a zombie attempt still cannot write an old epoch again:
 * insertLedgerRows refuses an epoch older than a committed one (StaleEpoch), also as one row of
 * a group epoch's several, and writes none of them.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { RowDataPacket } from 'mysql2/promise';
import { ConfigResourceTypes } from 'kafkajs';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { StaleEpoch } from '../src/errors';
import { insertLedgerRows, LEDGER_KEEP_EPOCHS, LEDGER_PRUNE_EVERY } from '../src/mysql/ledger';
import { createOnceflowWorker } from '../src/worker';
import { openDeps, quietRuntime, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify } from './support/pipeline';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

test(
  'the ledger is pruned to its first and last epochs, verify still passes, and a pruned epoch cannot be written again',
  { timeout: 300_000 },
  async () => {
    // One record per epoch: enough epochs for two prunes.
    const epochs = 2 * LEDGER_PRUNE_EVERY + 10;
    const s = await prepareScenario(deps, {
      prefix: 'ledger',
      records: epochs,
      partitions: 1,
      epoch: { maxRecords: 1, maxWaitMs: 200 },
    });
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      worker: { workflowBundle: { codePath: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '' } },
    });
    const running = w.run();
    try {
      const handle = await start(deps, s);
      await drainAndWait(deps, s, handle);
    } finally {
      w.shutdown();
      await running;
    }
    const [rows] = await deps.pool.query<RowDataPacket[]>(
      'SELECT epoch FROM onceflow_ledger WHERE pipeline = ? ORDER BY epoch',
      [s.spec.name],
    );
    const kept = rows.map((r) => Number(r.epoch));
    const last = kept[kept.length - 1]!;
    assert.ok(last >= 2 * LEDGER_PRUNE_EVERY, `ran ${last} epochs`);
    // The first row, then nothing older than LEDGER_KEEP_EPOCHS before the last prune.
    const lastPrune = last - (last % LEDGER_PRUNE_EVERY);
    assert.deepEqual(
      kept.slice(1),
      Array.from({ length: last - (lastPrune - LEDGER_KEEP_EPOCHS) + 1 }, (_, i) => lastPrune - LEDGER_KEEP_EPOCHS + i),
    );
    assert.ok(kept.length <= 1 + LEDGER_KEEP_EPOCHS + LEDGER_PRUNE_EVERY, `${kept.length} rows kept of ${last} epochs`);

    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(report.totals.sourceRecords, epochs);

    // A zombie's write of a pruned epoch: the primary key no longer stops it, the later epochs do —
    // also when it comes with another partition's row (a group epoch's rows go in one statement).
    const pruned = kept[0]! + 1;
    const row = { start: 0, end: 1, records: 1, redo: false };
    const conn = await deps.pool.getConnection();
    try {
      await conn.beginTransaction();
      for (const rows of [
        [{ partition: 0, epoch: pruned, ...row }],
        [
          { partition: 7, epoch: 0, ...row },
          { partition: 0, epoch: pruned, ...row },
        ],
      ]) {
        await assert.rejects(
          insertLedgerRows(conn, s.spec.name, rows),
          (e) => e instanceof StaleEpoch && e.message.includes(`epoch ${pruned} is stale`),
        );
      }
      const [written] = await conn.query<RowDataPacket[]>(
        'SELECT COUNT(*) AS n FROM onceflow_ledger WHERE pipeline = ? AND source_partition = 7',
        [s.spec.name],
      );
      assert.equal(Number(written[0]!.n), 0, 'no row of a refused group epoch is written');
      await conn.rollback();
    } finally {
      conn.release();
    }

    // The progress topic keeps only the newest marker per partition (compaction).
    const cfg = await deps.admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: s.spec.progressTopic, configNames: ['cleanup.policy'] }],
    });
    assert.equal(
      cfg.resources[0]!.configEntries.find((c) => c.configName === 'cleanup.policy')?.configValue,
      'compact',
    );
  },
);
