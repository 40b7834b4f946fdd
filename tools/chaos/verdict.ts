/**
 * A campaign's verdict: the verification of docs/design.md §8 (verifyPipeline), the per-record
 * audit and Kafka's own read_committed consumer, the faults summed up per kind and the checks.
 * tools/chaos/report.ts renders the result.
 */
import { toolPaths } from '../../src/config';
import { verifyPipeline, type Check, type VerifyReport } from '../../src/verify';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import { auditRecords, javaReadCommitted, type Audit, type JavaReadResult, type RangeStats } from './audit';
import { boundedStateChecks } from './bounds';
import type { InputFeeder, LandedInput } from './feeder';
import type { Evidence } from './observe';
import { CLUSTER_KINDS, INJECTED_KINDS, POINTS, SPLIT_KIND, type FaultKind, type PlannedFault } from './schedule';
import type { CampaignEnv } from './setup';
import type { WorkerSupervisor } from './stack';
import type { CampaignOptions, CampaignResult, FaultRecord, KindSummary, Sample } from './types';

/** What the run left for the verdict. */
export interface RunOutcome {
  started: number;
  plan: PlannedFault[];
  faults: FaultRecord[];
  stuck: string | undefined;
  evidence: Evidence;
  samples: Sample[];
  feeder: InputFeeder;
  workers: WorkerSupervisor;
  /** The ledger's rows as they appeared (tools/chaos/audit.ts), copied once more before the audit. */
  ledgerCopy: { spans: Parameters<typeof auditRecords>[1]; poll(): Promise<void> };
  stopCopying: () => void;
}

/** Verifies and audits the drained pipeline, sums the faults up and judges; closes the harness's clients. */
export async function judgeCampaign(env: CampaignEnv, run: RunOutcome): Promise<CampaignResult> {
  const { o, log, spec, cluster, admin, pool } = env;
  log('verifying (docs/design.md §8) and auditing every record');
  const verify: VerifyReport = await verifyPipeline({ cluster, admin, pool, transforms: compareTransforms() }, spec);
  run.stopCopying();
  await run.ledgerCopy.poll();
  const audit = await auditRecords(cluster, run.ledgerCopy.spans, spec, o.partitions);
  // The input as it landed, next to what the producer was told (the verdict above uses what landed).
  const input = await run.feeder.landed(cluster).catch((e) => {
    log(`input count failed: ${String(e)}`);
    return undefined;
  });
  if (input)
    log(
      `input: ${input.acked} acknowledged by kafkajs, ${input.inLog} in the source topic, ${input.ackedMissing} acknowledged but not in the log${input.examples.length ? ` (${input.examples.join(', ')})` : ''}, ${input.duplicates} extra copies`,
    );
  // Independent of onceflow's and kafkajs's read path: Kafka's own read_committed consumer.
  const kafkaLibs = toolPaths({ ONCEFLOW_SERVICES_ENV: env.envFile }).kafkaLibs;
  const javaRead: JavaReadResult | undefined = kafkaLibs
    ? await javaReadCommitted(kafkaLibs, env.settings.kafka.brokers, spec, o.partitions, cluster)
    : undefined;
  addFaultStats(run.faults, audit);
  const { evidence, faults } = run;
  evidence.workerSigkills = run.workers.exits.filter((x) => x.signal === 'SIGKILL' && !x.duringStop).length;
  evidence.workerRestarts = run.workers.starts - o.workers;
  const resets = (ps: { resets: number }[]) => ps.reduce((a, p) => a + p.resets, 0);
  evidence.proxyResetsBy = { kafka: resets(env.proxies.kafka), mysql: resets(env.proxies.mysql) };
  evidence.proxyResets = evidence.proxyResetsBy.kafka + evidence.proxyResetsBy.mysql;
  evidence.inputSendRetries = run.feeder.sendErrors;

  const plannedKinds = new Set<FaultKind>([...run.plan.map((f) => f.kind), 'sink-throw', 'poison']);
  const kinds = summarize(faults, evidence, audit.totals, plannedKinds);
  const checks = campaignChecks(o, {
    verify,
    audit: audit.totals,
    input,
    javaRead,
    kinds,
    faults,
    plan: run.plan,
    stuck: run.stuck,
    evidence,
    samples: run.samples,
  });
  await env.closeClients();
  const options: Partial<CampaignOptions> = { ...o };
  delete options.log;
  return {
    options: options as Omit<CampaignOptions, 'log'>,
    pipeline: env.name,
    workflowId: `onceflow/${env.name}`,
    startedAt: new Date(run.started).toISOString(),
    durationMs: Date.now() - run.started,
    produced: run.feeder.produced,
    faults,
    kinds,
    evidence,
    verify,
    ...(input ? { input } : {}),
    audit: audit.totals,
    ...(javaRead ? { javaRead } : {}),
    samples: run.samples,
    checks,
    ok: checks.every((c) => c.ok),
  };
}

/** Each recovered fault's records, duplicates and missing over the epochs it affected. */
function addFaultStats(faults: FaultRecord[], audit: Audit): void {
  for (const f of faults) {
    if (!f.injected || f.recoveryMs === undefined) continue;
    const s: RangeStats = { records: 0, duplicates: 0, missing: 0 };
    for (const a of f.affected) {
      const r = audit.range(a.partition, a.afterEpoch, a.throughEpoch);
      s.records += r.records;
      s.duplicates += r.duplicates;
      s.missing += r.missing;
    }
    f.stats = s;
  }
}

interface Judged {
  verify: VerifyReport;
  audit: CampaignResult['audit'];
  input: LandedInput | undefined;
  javaRead: JavaReadResult | undefined;
  kinds: KindSummary[];
  faults: FaultRecord[];
  plan: PlannedFault[];
  stuck: string | undefined;
  evidence: Evidence;
  samples: Sample[];
}

/** The campaign's checks: verify's, then the campaign's own, in the order the report lists them. */
function campaignChecks(o: CampaignOptions, j: Judged): Check[] {
  const { verify, audit, input, javaRead, kinds, faults, plan, evidence } = j;
  const injectedKinds = kinds.filter((k) => k.kind !== 'poison');
  return [
    ...verify.checks,
    {
      name: 'every scheduled fault was injected',
      ok: faults.length === plan.length && faults.every((f) => f.injected),
      detail: `${faults.filter((f) => f.injected).length} of ${plan.length}`,
    },
    kindCoverageCheck(kinds, faults, o.mode),
    {
      name: 'the pipeline recovered after every fault and drained',
      ok: j.stuck === undefined,
      detail: j.stuck ?? 'yes',
    },
    recoveryBoundCheck(faults, o.recoveryBoundMs),
    {
      name: 'per-record audit: one output or dead letter per source record',
      ok: audit.duplicates === 0 && audit.missing === 0,
      detail: `${audit.records} records, ${audit.duplicates} duplicate(s), ${audit.missing} missing`,
    },
    {
      name: "Kafka's own read_committed consumer (Java) sees each valid record once",
      ok:
        javaRead !== undefined &&
        javaRead.duplicates === 0 &&
        javaRead.missing === 0 &&
        javaRead.unexpected === 0 &&
        javaRead.records === verify.totals.outputs,
      detail: javaRead
        ? `${javaRead.records} records, ${javaRead.duplicates} duplicate(s), ${javaRead.missing} missing, ${javaRead.unexpected} unexpected`
        : 'Kafka jars not found',
    },
    {
      name: 'poison records dead-lettered once with reason and source coordinates',
      ok: audit.poison > 0 && audit.deadLetters === audit.poison && audit.deadLettersWithReason === audit.poison,
      detail: `${audit.poison} poison, ${audit.deadLetters} dead letters, ${audit.deadLettersWithReason} with reason and coordinates`,
    },
    {
      name: 'no XA branch of a committed epoch left prepared after any recovery',
      ok: faults.every((f) => f.danglingAfter === 0),
      detail: `${faults.reduce((a, f) => a + f.danglingAfter, 0)} found; ${faults.reduce((a, f) => a + (f.committingAfter ?? 0), 0)} listed while their XA COMMIT was in flight (the decided branch, its ledger row visible: not counted, and the end's check of prepared branches covers them)`,
    },
    {
      name: 'every forced split was detected and repaired',
      ok: (evidence.kafkaSplits ?? 0) >= (kinds.find((k) => k.kind === SPLIT_KIND)?.injected ?? 0),
      detail: `${kinds.find((k) => k.kind === SPLIT_KIND)?.injected ?? 0} splits forced (${SPLIT_KIND}), ${evidence.kafkaSplits ?? 0} epochs found split by their commit (a group epoch's split counts once per member)`,
    },
    {
      name: 'the faults really hit',
      ok:
        verify.totals.abortedCopies > 0 &&
        evidence.workerSigkills >= (injectedKinds.find((k) => k.kind === 'worker-kill')?.injected ?? 0) &&
        evidence.sinkThrows > 0,
      detail: `${verify.totals.abortedCopies} aborted copies visible to read_uncommitted, ${evidence.workerSigkills} worker SIGKILLs, ${evidence.sinkThrows} sink throws, ${evidence.redosKafka} Kafka redos`,
    },
    {
      name: `at least ${o.records} input records`,
      ok: verify.totals.sourceRecords >= o.records,
      detail: `${verify.totals.sourceRecords}`,
    },
    inputCheck(input),
    ...(o.mode === 'soak' ? boundedStateChecks(j.samples, o) : []),
  ];
}

function recoveryBoundCheck(faults: FaultRecord[], boundMs: number): Check {
  const late = faults.filter((f) => f.injected && (afterEndMs(f) ?? Infinity) > boundMs);
  const worst = Math.max(0, ...faults.map((f) => afterEndMs(f) ?? 0));
  return {
    name: `recovery bound: every affected partition progressed within ${boundMs / 1000} s after each fault ended`,
    ok: late.length === 0,
    detail: late.length
      ? late
          .map(
            (f) =>
              `#${f.n} ${f.kind} @ ${f.trigger}: ${f.recoveryMs === undefined ? 'never' : `${((afterEndMs(f) ?? 0) / 1000).toFixed(1)} s`}`,
          )
          .join('; ')
      : `longest ${(worst / 1000).toFixed(1)} s`,
  };
}

/**
 * Not onceflow's output: the harness's input producer (kafkajs) against the source topic. The
 * other checks judge the source as it landed; a difference is reported, never failed on.
 */
function inputCheck(input: LandedInput | undefined): Check {
  return {
    name: 'input as it landed (judged above) vs acknowledged by the input producer — a harness/kafkajs finding, not an onceflow check',
    ok: input !== undefined,
    detail: input
      ? `${input.acked} acknowledged, ${input.inLog} in the source topic; ${input.ackedMissing} acknowledged but missing${input.examples.length ? ` (${input.examples.join(', ')})` : ''}, ${input.duplicates} extra copies; per partition ${input.partitions.map((p) => `p${p.partition} ${p.acked}/${p.inLog}`).join(', ')} (acked/in log)`
      : 'the source topic could not be read back',
  };
}

/**
 * Each planned kind injected at least 5× (every-step, cluster) or once (cover, soak) — or as
 * often as it was scheduled, if that is fewer (the cluster campaign's single stalled commit).
 */
export function kindCoverageCheck(
  kinds: KindSummary[],
  faults: Pick<FaultRecord, 'kind'>[],
  mode: CampaignOptions['mode'],
): Check {
  const minEach = mode === 'every-step' || mode === 'cluster' ? 5 : 1;
  const scheduled = new Map<FaultKind, number>();
  for (const f of faults) scheduled.set(f.kind, (scheduled.get(f.kind) ?? 0) + 1);
  const planned = kinds.filter((k) => scheduled.has(k.kind) || k.kind === 'sink-throw' || k.kind === 'poison');
  const need = (k: KindSummary) => Math.min(minEach, scheduled.get(k.kind) ?? minEach);
  return {
    name: mode === 'soak' ? 'every planned fault kind injected' : `every fault kind injected at least ${minEach}×`,
    ok: planned.every((k) => k.injected >= need(k)),
    detail: planned
      .map((k) => `${k.kind} ${k.injected}${need(k) < minEach ? ` (${scheduled.get(k.kind)} scheduled)` : ''}`)
      .join(', '),
  };
}

/** How long after the fault ended its partitions took to progress again. */
export const afterEndMs = (f: FaultRecord): number | undefined =>
  f.recoveryMs === undefined ? undefined : Math.max(0, f.recoveryMs - (f.faultMs ?? 0));

const TRIGGER_ORDER: string[] = [...POINTS, 'random'];

function summarize(
  faults: FaultRecord[],
  ev: CampaignResult['evidence'],
  audit: CampaignResult['audit'],
  planned: Set<FaultKind>,
): KindSummary[] {
  // The single-node kinds always (their report lists each); the cluster kinds when planned.
  const kinds: FaultKind[] = [
    ...(planned.has(CLUSTER_KINDS[0]) ? CLUSTER_KINDS.filter((k) => planned.has(k)) : INJECTED_KINDS),
    'txn-timeout',
    ...(planned.has(SPLIT_KIND) ? [SPLIT_KIND] : []),
  ];
  const out: KindSummary[] = kinds.map((kind) => {
    const fs = faults.filter((f) => f.kind === kind && f.injected);
    const rec = fs.map((f) => f.recoveryMs).filter((x): x is number => x !== undefined);
    const afterEnd = fs.map(afterEndMs).filter((x): x is number => x !== undefined);
    const steps = new Map<string, number>();
    for (const f of fs) steps.set(f.trigger, (steps.get(f.trigger) ?? 0) + 1);
    return {
      kind,
      injected: fs.length,
      atSteps: [...steps]
        .sort(([a], [b]) => TRIGGER_ORDER.indexOf(a) - TRIGGER_ORDER.indexOf(b))
        .map(([t, n]) => `${t}×${n}`)
        .join(', '),
      records: fs.reduce((a, f) => a + (f.stats?.records ?? 0), 0),
      duplicates: fs.reduce((a, f) => a + (f.stats?.duplicates ?? 0), 0),
      missing: fs.reduce((a, f) => a + (f.stats?.missing ?? 0), 0),
      dangling: fs.reduce((a, f) => a + f.danglingAfter, 0),
      longestRecoveryMs: rec.length ? Math.max(...rec) : null,
      longestAfterEndMs: afterEnd.length ? Math.max(...afterEnd) : null,
    };
  });
  out.push({
    kind: 'sink-throw',
    injected: ev.sinkThrows,
    atSteps: 'during prepare, after the batch was written',
    records: 0,
    duplicates: 0,
    missing: 0,
    dangling: 0,
    longestRecoveryMs: null,
    longestAfterEndMs: null,
  });
  out.push({
    kind: 'poison',
    injected: audit.poison,
    atSteps: 'in the input',
    records: audit.poison,
    duplicates: Math.max(0, audit.deadLetters - audit.poison),
    missing: Math.max(0, audit.poison - audit.deadLetters),
    dangling: 0,
    longestRecoveryMs: null,
    longestAfterEndMs: null,
  });
  return out;
}
