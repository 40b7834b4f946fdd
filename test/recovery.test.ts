/**
 * Every in-doubt state `onceflow transactions` can report, made on the real services by killing
 * a worker in the middle of an epoch's commit and terminating the pipeline's workflows, as an
 * operator might. Following what the command prints — `--resolve` while stopped, then start the
 * pipeline again — must end in a running pipeline that drains and verifies exactly once.
 * Reconcile and the command decide through the same recovery path (src/recovery.ts); the last
 * test holds a decided branch attached to its preparing session and requires that path to wait.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { TransientError } from '../src/errors';
import { recoverXids, rollbackXid } from '../src/mysql/branch';
import { insertLedgerRows, ledgerRow } from '../src/mysql/ledger';
import { epochGtrid, xidSql, xidToString } from '../src/mysql/xid';
import type { EpochEvidence } from '../src/protocol/epoch';
import { carryOut, type PartitionFindings } from '../src/recovery';
import { partitionWorkflowId, pipelineWorkflowId, type PipelineSpec } from '../src/spec';
import { createOnceflowWorker } from '../src/worker';
import { faultFired, openDeps, quietRuntime, spawnWorker, uniqueName, type Deps } from './support/env';
import { drainAndWait, failedChecks, prepareScenario, start, verify, type Scenario } from './support/pipeline';
import { cli } from './support/cli';

let deps: Deps;
before(async () => {
  quietRuntime();
  deps = await openDeps();
});
after(async () => deps.close());

/** Runs the pipeline on a worker that stalls at `fault` in epoch 1's commit, then kills the worker and terminates the workflows. */
async function crashMidCommit(s: Scenario, fault: string): Promise<void> {
  const doomed = spawnWorker(s.taskQueue, {
    ONCEFLOW_FAULTS: `${fault}@epoch=1@partition=0:stall=120000`,
    ONCEFLOW_WORKFLOW_BUNDLE: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '',
  });
  try {
    await start(deps, s);
    await faultFired(doomed, 'stall=120000', `${fault}@epoch=1@partition=0`, 90_000);
    await new Promise((r) => setTimeout(r, 1000)); // the other side of the commit finishes
    for (const id of [partitionWorkflowId(s.spec.name, 0), pipelineWorkflowId(s.spec.name)])
      await deps.client.workflow.getHandle(id).terminate('recovery.test.ts: operator gave up');
  } finally {
    doomed.kill('SIGKILL');
    await doomed.exited;
  }
}

/** Follows the instructions: resolve while stopped, then start again; the pipeline must drain and verify. */
async function resolveStartVerify(s: Scenario, records: number): Promise<string> {
  const resolved = await cli('transactions', s.spec.name, '--resolve');
  assert.equal(resolved.code, 0, resolved.err);
  const w = await createOnceflowWorker({
    settings: deps.settings,
    taskQueue: s.taskQueue,
    transforms: compareTransforms(),
    worker: { workflowBundle: { codePath: process.env.ONCEFLOW_WORKFLOW_BUNDLE ?? '' } },
  });
  const running = w.run();
  try {
    const handle = await start(deps, s);
    const [result] = await drainAndWait(deps, s, handle);
    assert.ok(result);
    const report = await verify(deps, s);
    assert.ok(report.ok, failedChecks(report));
    assert.equal(report.totals.outputs, records);
    const after = await cli('transactions', s.spec.name);
    assert.match(after.out, /nothing in doubt/);
    return resolved.out;
  } finally {
    w.shutdown();
    await running;
  }
}

test(
  'Kafka committed, XA branch prepared: transactions commits the branch the marker names; restart runs on',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'rec-commit', records: 400, partitions: 1 });
    await crashMidCommit(s, 'commit.mysql');
    const listed = await cli('transactions', s.spec.name);
    assert.equal(listed.code, 0, listed.err);
    assert.match(listed.out, /partition 0 epoch 1: XA \S+: would commit \(the committed progress marker names it\)/);
    assert.match(listed.out, /partition 0 epoch 1: committed, staged rows not yet in the tables → would apply/);
    const resolved = await resolveStartVerify(s, 400);
    assert.match(resolved, /partition 0 epoch 1: XA \S+ committed/);
    assert.match(resolved, /partition 0 epoch 1: staged rows applied to the tables/);
  },
);

test(
  'MySQL committed, Kafka transaction left open: resolve fences it, the restart redoes the Kafka side',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'rec-kafka', records: 400, partitions: 1 });
    await crashMidCommit(s, 'commit.before');
    const listed = await cli('transactions', s.spec.name);
    assert.match(
      listed.out,
      /partition 0 epoch 1: MySQL committed, Kafka did not → starting the pipeline redoes the Kafka side/,
    );
    assert.match(listed.out, /held back by an open transaction/);
    const resolved = await resolveStartVerify(s, 400);
    assert.match(resolved, /fenced; any open transaction of it was aborted/);
    assert.match(resolved, /start the pipeline again: its reconcile redoes that side/);
  },
);

test(
  'Kafka committed, the decided XA branch rolled back by hand: the restart redoes the MySQL side',
  { timeout: 240_000 },
  async () => {
    const s = await prepareScenario(deps, { prefix: 'rec-mysql', records: 400, partitions: 1 });
    await crashMidCommit(s, 'commit.mysql');
    const gtrid = epochGtrid(s.spec.name, 0, 1);
    const branches = (await recoverXids(deps.pool, gtrid)).filter((x) => x.gtrid === gtrid);
    assert.equal(branches.length, 1, 'epoch 1 has its decided branch prepared');
    await rollbackXid(deps.pool, branches[0]!);
    const listed = await cli('transactions', s.spec.name);
    assert.match(
      listed.out,
      /partition 0 epoch 1: Kafka committed, MySQL did not → starting the pipeline redoes the MySQL side/,
    );
    await resolveStartVerify(s, 400);
  },
);

test(
  'a decided branch still attached to the session that prepared it: recovery waits for it to detach, fails retryably meanwhile, and never moves past it',
  { timeout: 60_000 },
  async () => {
    const pipeline = uniqueName('attached');
    const xid = { gtrid: epochGtrid(pipeline, 0, 0), bqual: 'attached-1' };
    const findings: PartitionFindings = {
      partition: 0,
      ledger: null,
      marker: null,
      next: null,
      epochs: [{ epoch: 0, evidence: {} as EpochEvidence, actions: [{ do: 'commit-branch', xid: xidToString(xid) }] }],
    };
    const recover = () => carryOut(deps, { name: pipeline } as PipelineSpec, findings, { apply: async () => false });
    // Prepared on a session that stays open (a worker cut off from MySQL right after XA PREPARE):
    // other sessions get XAER_NOTA while XA RECOVER lists it.
    const conn = await deps.pool.getConnection();
    try {
      await conn.query(`XA START ${xidSql(xid)}`);
      await insertLedgerRows(conn, pipeline, [{ partition: 0, epoch: 0, start: 0, end: 1, records: 1, redo: false }]);
      await conn.query(`XA END ${xidSql(xid)}`);
      await conn.query(`XA PREPARE ${xidSql(xid)}`);
      const attached = (e: unknown) => e instanceof TransientError && /still attached to the session/.test(e.message);
      await assert.rejects(recover(), attached, 'reconcile and --resolve do not take an attached branch as done');
      await assert.rejects(rollbackXid(deps.pool, xid), attached, 'nor a rollback');
      assert.deepEqual(await recoverXids(deps.pool, xid.gtrid), [xid], 'still prepared');
    } finally {
      conn.destroy();
    }
    // Detached once its session is gone: committed, with what it wrote.
    assert.deepEqual(await recover(), [
      `partition 0 epoch 0: XA ${xidToString(xid)} committed (the progress marker names it: its Kafka side committed)`,
    ]);
    assert.equal((await ledgerRow(deps.pool, pipeline, 0, 0))?.end, 1);
    await deps.pool.query('DELETE FROM onceflow_ledger WHERE pipeline = ?', [pipeline]);
  },
);
