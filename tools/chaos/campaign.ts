/**
 * The fault campaign (issue 4): a pipeline over several partitions with two worker processes,
 * a live input stream, and a seeded schedule of faults — worker SIGKILLs, clean and hard
 * restarts of Kafka, MariaDB and the Temporal dev server, a worker cut off from Kafka or
 * MySQL, a commit stalled past the transaction timeout — each at random moments and at every
 * named protocol step, plus the failing "compare" sink and poison records in the data. One
 * fault at a time: inject, measure the time until the pipeline commits again, next.
 * Ends with a drain and the verification of docs/design.md §8 (verifyPipeline) plus a per-record audit.
 *
 * This file is the driver. The stage: tools/chaos/setup.ts; what fault when:
 * tools/chaos/schedule.ts; carrying it out: tools/chaos/inject.ts; hearing the workers and
 * sampling: tools/chaos/observe.ts; measuring recovery: tools/chaos/recovery.ts; the verdict:
 * tools/chaos/verdict.ts, rendered by tools/chaos/report.ts.
 */
import { controlPipeline, startPipeline } from '../../src/client';
import { makeEvents } from '../../examples/flink-compare/scenario';
import { ledgerCopier } from './audit';
import { InputFeeder } from './feeder';
import { Injector } from './inject';
import { takeSample, WorkerReports } from './observe';
import { afterRecovery, awaitRecovery, LedgerProbe, waitFor } from './recovery';
import { planFaults, type PlannedFault, type ScheduleOptions } from './schedule';
import { openCampaign, superviseWorkers, type CampaignEnv } from './setup';
import { ServiceFreezer } from './stack';
import type { CampaignOptions, CampaignResult, FaultRecord, Sample } from './types';
import { judgeCampaign } from './verdict';

export type { CampaignOptions, CampaignResult, FaultRecord, KindSummary, Sample } from './types';

export async function runCampaign(o: CampaignOptions): Promise<CampaignResult> {
  const started = Date.now();
  const env = await openCampaign(o);
  const { log, spec, name, client } = env;
  const { values } = makeEvents(Math.ceil(o.records * (o.inputMultiplier ?? 5)), o.seed, o.poisonEvery);
  const feeder = new InputFeeder(
    env.settings.kafka,
    spec.source.topic,
    o.partitions,
    values,
    o.ratePerSecond,
    o.records,
    log,
  );
  const reports = new WorkerReports();
  const freezer = new ServiceFreezer();
  // The ledger keeps only its first and last epochs: copy its rows as they appear, for the audit.
  const ledgerCopy = ledgerCopier(env.pool, name);
  const copyTimer = setInterval(() => void ledgerCopy.poll().catch(() => undefined), 5000);
  const samples: Sample[] = [];
  const workers = superviseWorkers(env, reports.onLine);
  const ledger = new LedgerProbe(env);
  const injector = new Injector(env, workers, freezer, reports, ledger);
  const plan = planFaults(scheduleOptions(o));
  log(
    `pipeline ${name}: ${o.partitions} partitions${env.grouped ? ` in ${spec.parallelism} groups` : ''}, ${o.workers} workers, ${plan.length} scheduled faults, input ≥ ${o.records} records at ${o.ratePerSecond}/s`,
  );
  const take = () =>
    void takeSample(env, started, () => feeder.produced, reports.workerStats)
      .then((x) => {
        samples.push(x);
        log(`sample: ${JSON.stringify(x)}`);
      })
      .catch((e) => log(`sample failed: ${String(e)}`));
  const sampleTimer = o.sampleEveryMs ? setInterval(take, o.sampleEveryMs) : undefined;
  const faults: FaultRecord[] = [];
  let stuck: string | undefined;
  try {
    await env.proxies.start();
    workers.start();
    const handle = await startPipeline(client, spec, env.taskQueue);
    feeder.start();
    await waitFor(
      'every partition to commit a first epoch',
      async () => (await ledger.ledgerMax()).size === o.partitions,
      120_000,
    );
    await waitFor('both workers to be ready', async () => reports.ready.size === o.workers, 60_000);
    stuck = await runFaults(env, plan, faults, injector, ledger, () => feeder.produced);
    injector.arm([]);
    if (!stuck) {
      log(
        `faults done; producing the rest of the input (${Math.max(0, o.records - feeder.produced)} records) and draining`,
      );
      await feeder.finish();
      await controlPipeline(client, name, 'drain');
      if (!(await drained(handle.result(), 15 * 60_000))) stuck = 'the pipeline did not drain within 15 minutes';
    } else {
      await feeder.stop();
    }
  } catch (e) {
    // A run that ends here (e.g. no first epoch) must not leave the process hanging on open clients.
    clearInterval(copyTimer);
    await env.closeClients();
    throw e;
  } finally {
    injector.arm([]);
    clearInterval(sampleTimer);
    freezer.thawAll();
    await feeder.stop();
    await workers.stop();
    await env.proxies.close();
  }
  return judgeCampaign(env, {
    started,
    plan,
    faults,
    stuck,
    evidence: reports.evidence,
    samples,
    feeder,
    workers,
    ledgerCopy,
    stopCopying: () => clearInterval(copyTimer),
  });
}

/** What the schedule (tools/chaos/schedule.ts) takes of the campaign's options. */
function scheduleOptions(o: CampaignOptions): ScheduleOptions {
  return {
    seed: o.seed,
    partitions: o.partitions,
    workers: o.workers,
    mode: o.mode,
    randomEach: o.randomEach,
    txnTimeouts: o.txnTimeouts,
    ...(o.splits ? { splits: o.splits } : {}),
    ...(o.soakFaults !== undefined ? { soakFaults: o.soakFaults } : {}),
    ...(o.soakSpacingMs ? { soakSpacingMs: o.soakSpacingMs } : {}),
  };
}

/** One fault at a time, as planned: inject, wait until the affected partitions commit again, next. The reason if the pipeline got stuck. */
async function runFaults(
  env: CampaignEnv,
  plan: PlannedFault[],
  faults: FaultRecord[],
  injector: Injector,
  ledger: LedgerProbe,
  produced: () => number,
): Promise<string | undefined> {
  for (const f of plan) {
    const rec: FaultRecord = { ...f, injected: false, affected: [], danglingAfter: 0, note: '' };
    faults.push(rec);
    const win = await injector.carryOut(f, rec);
    if (!rec.injected) {
      env.log(`#${f.n} ${f.kind} @ ${f.trigger}: NOT injected (${rec.note})`);
      continue;
    }
    rec.at = new Date(win.t0).toISOString();
    const stuck = await awaitRecovery(env, ledger, f, rec, win);
    if (stuck) return stuck;
    await afterRecovery(env, ledger, f, rec, plan.length, produced);
  }
  return undefined;
}

/** Whether the pipeline's workflow ended within `timeoutMs`. */
async function drained(result: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const ended = await Promise.race([
    result.then(() => true),
    new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs))),
  ]);
  clearTimeout(timer);
  return ended;
}
