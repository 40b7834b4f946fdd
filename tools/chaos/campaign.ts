/**
 * The fault campaign (issue 4): a pipeline over several partitions with two worker processes,
 * a live input stream, and a seeded schedule of faults — worker SIGKILLs, clean and hard
 * restarts of Kafka, MariaDB and the Temporal dev server, a worker cut off from Kafka or
 * MySQL, a commit stalled past the transaction timeout — each at random moments and at every
 * named protocol step, plus the failing "compare" sink and poison records in the data. One
 * fault at a time: inject, measure the time until the pipeline commits again, next.
 * Ends with a drain and the verification of docs/design.md §8 (verifyPipeline) plus a per-record audit.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { createPool, type RowDataPacket } from 'mysql2/promise';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import { connectClient, controlPipeline, partitionStatus, startPipeline } from '../../src/client';
import { loadSettings, toolPaths } from '../../src/config';
import type { FaultPoint } from '../../src/faults';
import { kafkaClientConfig } from '../../src/kafka/client-config';
import { connectCluster } from '../../src/kafka/internals';
import { createTopicsReady } from '../../src/kafka/topics';
import { PROGRESS_TOPIC_CONFIG } from '../../src/activities/setup';
import { recoverXids } from '../../src/mysql/branch';
import { parseGroupGtrid, parseGtrid, pipelineGtridPrefix, xidToString } from '../../src/mysql/xid';
import { groupOf, groupTransactionalId, runnerWorkflowId, transactionalId } from '../../src/spec';
import type { GroupStatus } from '../../src/workflows/interface';
import { compareSpec, makeEvents, resetPipeline } from '../../examples/flink-compare/scenario';
import { verifyPipeline, type Check, type VerifyReport } from '../../src/verify';
import { compareTransforms } from '../../examples/flink-compare/transforms';
import { auditRecords, javaReadCommitted, ledgerCopier, type JavaReadResult, type RangeStats } from './audit';
import { boundedStateChecks } from './bounds';
import { clusterWhole, nodeServices, partitionLeader, quorumLeader, transactionCoordinator } from './cluster';
import { InputFeeder, type LandedInput } from './feeder';
import { CLUSTER_KINDS, INJECTED_KINDS, planFaults, POINTS, SPLIT_KIND, type ClusterKind, type FaultKind, type PlannedFault } from './schedule';
import { ServiceFreezer, services, servicesEnv, stackPorts, startProxies, WorkerSupervisor, type StackOptions } from './stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface CampaignOptions {
  seed: number;
  /** Input records at least (more if the faults outlast the steady stream). */
  records: number;
  partitions: number;
  /**
   * spec.parallelism of the campaign's pipeline: partition groups (source partition p in group
   * p mod parallelism, one Kafka transaction and one XA branch per group epoch). Absent: one
   * workflow per partition.
   */
  parallelism?: number;
  workers: number;
  /** Records per second of the live input stream while faults run. */
  ratePerSecond: number;
  mode: 'every-step' | 'cover' | 'soak' | 'cluster';
  randomEach: number;
  /** Kafka nodes of the stack (3: the cluster campaign, run without the Kafka proxies). */
  kafkaNodes?: number;
  /** Dedicated KRaft controllers beside the Kafka nodes (3), or none (combined nodes). */
  kafkaControllers?: number;
  /** soak mode: how many faults, and the quiet time before each. */
  soakFaults?: number;
  soakSpacingMs?: [number, number];
  /** Input values prepared, as a multiple of `records` (the stream may outlast the minimum). */
  inputMultiplier?: number;
  /** Samples of worker memory, event-loop delay, history and table sizes this often (soak). */
  sampleEveryMs?: number;
  txnTimeouts: number;
  /** Transactions split at their commit, alternately the markers and the outputs committed (kafka-split). */
  splits?: number;
  transactionTimeoutMs: number;
  maxRecords: number;
  /** The compare sink throws mid-batch on the first attempt of every n-th epoch… */
  compareFailEveryNthEpoch: number;
  /** …once more than this many records of the epoch were written. */
  compareFailAfter: number;
  poisonEvery: number;
  portBase: number;
  runDir: string;
  /** Give up on a fault (stuck) after this long. */
  recoveryTimeoutMs: number;
  /**
   * The recovery bound: every affected partition must commit an epoch prepared after the fault
   * within this long after the fault ended (a restart returned, a freeze or cut was lifted).
   */
  recoveryBoundMs: number;
  /** How the campaign was started (written to the report so it can be replayed). */
  command: string;
  /** Code revision the campaign ran (git), for the report. */
  revision?: string;
  /** Kafka version and node layout the campaign's stack ran (ONCEFLOW_KAFKA_VERSION, ONCEFLOW_KAFKA_CONTROLLERS), for the report. */
  kafkaVersion?: string;
  kafkaLayout?: string;
  log: (line: string) => void;
}

export interface FaultRecord extends PlannedFault {
  injected: boolean;
  at?: string;
  /** Epoch the protocol-step trigger fired at (a group epoch when `group` is set). */
  epoch?: number;
  /** Grouped pipeline: the group whose epoch the trigger fired at (the group of `partition`). */
  group?: number;
  hitWorker?: number;
  recoveryMs?: number;
  /** From injection until the fault ended (a restart returned, a freeze or cut was lifted). */
  faultMs?: number;
  affected: { partition: number; afterEpoch: number; throughEpoch: number }[];
  /** XA branches of already committed epochs still prepared after recovery. */
  danglingAfter: number;
  stats?: RangeStats;
  note: string;
  /** Cluster kinds: the node killed and why it was the target. */
  node?: number;
  target?: string;
  /** Cluster kinds: from the node's return until every node was in every ISR again. */
  wholeAgainMs?: number;
}

export interface KindSummary {
  kind: FaultKind;
  injected: number;
  atSteps: string;
  records: number;
  duplicates: number;
  missing: number;
  dangling: number;
  longestRecoveryMs: number | null;
  /** Longest time from the end of a fault of this kind until every affected partition progressed. */
  longestAfterEndMs: number | null;
}

/** One soak sample: what a long run must keep bounded. */
export interface Sample {
  atS: number;
  produced: number;
  committedRecords: number;
  workerRssMb: (number | null)[];
  loopDelayP99Ms: (number | null)[];
  historyEvents: number[];
  historyBytes: number[];
  ledgerRows: number;
  stagedRows: number;
  tableBytes: number;
  progressTopicRecords: number;
}

export interface CampaignResult {
  options: Omit<CampaignOptions, 'log'>;
  pipeline: string;
  workflowId: string;
  startedAt: string;
  durationMs: number;
  produced: number;
  faults: FaultRecord[];
  kinds: KindSummary[];
  evidence: {
    workerSigkills: number;
    workerRestarts: number;
    sinkThrows: number;
    redosKafka: number;
    /** Epochs whose Kafka transaction came out split (committed on some partitions, aborted on others), each repaired by a redo of the aborted parts. */
    kafkaSplits?: number;
    redosMysql: number;
    rolledBackBranches: number;
    txnTimeoutPrecursors: number;
    proxyResets: number;
    inputSendRetries: number;
    /** prepare attempts failed by src/kafka/landed.ts (an acknowledgement without a partition it carried, or records short in the log). */
    landedCheckFailures?: number;
  };
  verify: VerifyReport;
  /** What the input producer had acknowledged against what the source topic holds. */
  input?: LandedInput;
  audit: Awaited<ReturnType<typeof auditRecords>>['totals'];
  javaRead?: JavaReadResult;
  samples: Sample[];
  /** Set when the checks were computed again from a saved result (--from) by this code revision. */
  judgedBy?: string;
  checks: Check[];
  ok: boolean;
}

interface FaultLine {
  action: string;
  point: FaultPoint;
  epoch: number;
  partition: number;
  attempt: number;
  pid: number;
  worker: number;
  at: number;
}

const FAULT_RE = /^\[faults\] (SIGKILL|throw|stall=\d+|freeze=\d+|split=\w+) at (\S+) epoch=(\d+) partition=(\d+) attempt=(\d+) pid=(\d+)/;
const HOLD_MS = 1500;
/** The worker's log line of a prepare attempt failed by src/kafka/landed.ts. */
const LANDED_RE = /error: ApplicationFailure: (Kafka acknowledged a send without|acknowledged records missing from the log)/;
/** A frozen worker stays stopped past the activities' heartbeat timeout (10 s), so its attempts time out and become zombies. */
/** A worker freeze outlasts the recovery bound: the other worker must carry every partition on meanwhile (its recovery is measured from the freeze's start). */
const FREEZE_MS = 45_000;

export async function runCampaign(o: CampaignOptions): Promise<CampaignResult> {
  const log = o.log;
  const started = Date.now();
  const nodes = o.kafkaNodes ?? 1;
  const stack: StackOptions = { runDir: o.runDir, portBase: o.portBase, workers: o.workers, ...(nodes > 1 ? { kafkaNodes: nodes, kafkaControllers: o.kafkaControllers ?? 0 } : {}) };
  const ports = stackPorts(stack);
  const logDir = join(o.runDir, 'campaign');
  mkdirSync(logDir, { recursive: true });
  const faultsFile = join(logDir, 'faults.rules');
  writeFileSync(faultsFile, '');

  log(`seed ${o.seed}: bringing up the isolated stack in ${o.runDir} (ports ${ports.temporal}, ${ports.kafka}, ${ports.mysql})`);
  await services(stack, ['up']);
  const envFile = join(o.runDir, 'services.env');
  const settings = loadSettings({ ONCEFLOW_SERVICES_ENV: envFile });
  // Started in the try below (the workers are their only users), so that `finally` closes them.
  const proxies = startProxies(stack);

  let bundle = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
  if (!bundle) {
    bundle = join(logDir, 'workflow-bundle.js');
    const { code } = await bundleWorkflowCode({ workflowsPath: require.resolve('../../src/workflows'), logger: new DefaultLogger('WARN') });
    writeFileSync(bundle, code);
  }

  const kafka = new Kafka({ ...kafkaClientConfig(settings.kafka, 'onceflow-chaos'), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const pool = createPool({ ...settings.mysql, connectionLimit: 4, dateStrings: true });
  const cluster = await connectCluster({ ...kafkaClientConfig(settings.kafka, 'onceflow-chaos'), logLevel: logLevel.NOTHING });
  const kafkaLibsDir = toolPaths({ ONCEFLOW_SERVICES_ENV: envFile }).kafkaLibs;
  const client = await connectClient(settings);

  const name = `chaos-${o.seed}-${Date.now().toString(36)}`;
  const spec = compareSpec({
    name,
    source: { topic: `${name}.in` },
    kafkaSink: { topic: `${name}.out`, transactionTimeoutMs: o.transactionTimeoutMs },
    epoch: { maxRecords: o.maxRecords, maxWaitMs: 1000 },
    transformOptions: { table: `t_${name.replace(/[^a-z0-9]/g, '_')}`, compareFailAfter: o.compareFailAfter, compareFailEveryNthEpoch: o.compareFailEveryNthEpoch },
    ...(o.parallelism ? { parallelism: o.parallelism } : {}),
    // Poison records are part of the data under test, not a transform bug: a small epoch of a
    // group can hold one from each member, so the budget is explicit (design.md §1.1).
    deadLetter: { maxRatio: 0.1 },
  });
  const grouped = spec.parallelism !== undefined;
  /** The source partitions of group g (grouped pipelines). */
  const membersOf = (g: number) => Array.from({ length: o.partitions }, (_, p) => p).filter((p) => groupOf(spec, p) === g);
  /** The workflows that run the pipeline's partitions: one per group, or one per partition. */
  const runnerIds = [...new Set(Array.from({ length: o.partitions }, (_, p) => runnerWorkflowId(spec, p)))];
  /** A group's own status (its group epoch counter, in-flight epochs), from its workflow. */
  const groupStatus = (g: number) => client.workflow.getHandle(runnerWorkflowId(spec, g)).query<GroupStatus, []>('status');
  await resetPipeline(admin, pool, spec, o.partitions);
  // A cluster: the pipeline's other topics are created here, as setup would create them, and every
  // node is given time to learn them before the pipeline starts — setup creates missing topics and
  // then lists topics through whichever node it asks; a node that has not caught up answers
  // without them, which setup takes for a configuration error ('has no partitions', seen with
  // seed 20261202; a setup race on clusters, reported, not fixed here).
  if (nodes > 1) {
    await createTopicsReady(admin, [
      { topic: spec.kafkaSink.topic, numPartitions: o.partitions, replicationFactor: -1 },
      { topic: spec.deadLetterTopic, numPartitions: o.partitions, replicationFactor: -1 },
      { topic: spec.progressTopic, numPartitions: o.partitions, replicationFactor: -1, configEntries: PROGRESS_TOPIC_CONFIG },
    ]);
    await sleep(5000);
  }
  const { values } = makeEvents(Math.ceil(o.records * (o.inputMultiplier ?? 5)), o.seed, o.poisonEvery);
  const feeder = new InputFeeder(settings.kafka, spec.source.topic, o.partitions, values, o.ratePerSecond, o.records, log);

  // ---- workers and what they report
  const lines: FaultLine[] = [];
  const waiters = new Set<(l: FaultLine) => void>();
  const evidence = { workerSigkills: 0, workerRestarts: 0, sinkThrows: 0, redosKafka: 0, kafkaSplits: 0, redosMysql: 0, rolledBackBranches: 0, txnTimeoutPrecursors: 0, proxyResets: 0, inputSendRetries: 0, landedCheckFailures: 0 };
  const ready = new Set<number>();
  const workerStats: ({ rssMb: number; loopP99Ms: number } | undefined)[] = [];
  const freezer = new ServiceFreezer();
  // The ledger keeps only its first and last epochs: copy its rows as they appear, for the audit.
  const ledgerCopy = ledgerCopier(pool, name);
  const copyTimer = setInterval(() => void ledgerCopy.poll().catch(() => undefined), 5000);
  const samples: Sample[] = [];
  const taskQueue = `${name}-tq`;
  const workers = new WorkerSupervisor(
    o.workers,
    (i) => ({
      ...servicesEnv(stack),
      ONCEFLOW_SERVICES_ENV: envFile,
      ONCEFLOW_TASK_QUEUE: taskQueue,
      // A cluster's workers reach its nodes directly (brokers from services.env); one node reaches worker i through its proxy.
      ...(nodes > 1 ? {} : { ONCEFLOW_KAFKA_BROKERS: `127.0.0.1:${ports.kafkaProxy(i)}` }),
      ONCEFLOW_MYSQL_PORT: String(ports.mysqlProxy(i)),
      ONCEFLOW_FAULTS_FILE: faultsFile,
      ONCEFLOW_WORKFLOW_BUNDLE: bundle!,
    }),
    logDir,
    (worker, line) => {
      const m = FAULT_RE.exec(line);
      if (m) {
        const l: FaultLine = { action: m[1]!, point: m[2] as FaultPoint, epoch: Number(m[3]), partition: Number(m[4]), attempt: Number(m[5]), pid: Number(m[6]), worker, at: Date.now() };
        lines.push(l);
        for (const w of waiters) w(l);
        return;
      }
      if (LANDED_RE.test(line)) evidence.landedCheckFailures++;
      else if (line.startsWith('[chaos] sink-throw')) evidence.sinkThrows++;
      else if (line.startsWith('[chaos] redo side=kafka')) evidence.redosKafka++;
      else if (line.startsWith('[chaos] redo side=mysql')) evidence.redosMysql++;
      else if (line.startsWith('[chaos] split ')) evidence.kafkaSplits++;
      else if (line.startsWith('[chaos] rolled-back')) evidence.rolledBackBranches++;
      else if (line.startsWith('[chaos] ready')) ready.add(worker);
      else if (line.startsWith('[chaos] stats')) {
        const m = /rss=(\d+) loop-p99-ms=([\d.]+)/.exec(line);
        if (m) workerStats[worker] = { rssMb: Number(m[1]) / 2 ** 20, loopP99Ms: Number(m[2]) };
      }
    },
  );
  const waitLine = (pred: (l: FaultLine) => boolean, timeoutMs: number) =>
    new Promise<FaultLine | undefined>((resolve) => {
      const done = (l: FaultLine | undefined) => {
        waiters.delete(w);
        clearTimeout(t);
        resolve(l);
      };
      const w = (l: FaultLine) => pred(l) && done(l);
      const t = setTimeout(() => done(undefined), timeoutMs);
      waiters.add(w);
    });
  const arm = (rules: string[]) => writeFileSync(faultsFile, rules.join('\n'));

  // ---- progress as the ledger shows it (read directly, never through a proxy)
  const ledgerMax = async (): Promise<Map<number, number>> => {
    const [rows] = await pool.query<RowDataPacket[]>('SELECT source_partition AS p, MAX(epoch) AS e FROM onceflow_ledger WHERE pipeline = ? GROUP BY source_partition', [name]);
    return new Map(rows.map((r) => [Number(r.p), Number(r.e)]));
  };
  const dbNow = async (): Promise<string> => {
    const [rows] = await pool.query<RowDataPacket[]>('SELECT NOW(3) AS now');
    return String(rows[0]!.now);
  };
  /** First epoch per partition whose ledger row was written (in prepare) after `since` and is committed. */
  const progressedSince = async (since: string): Promise<Map<number, number>> => {
    const [rows] = await pool.query<RowDataPacket[]>('SELECT source_partition AS p, MIN(epoch) AS e FROM onceflow_ledger WHERE pipeline = ? AND committed_at > ? GROUP BY source_partition', [name, since]);
    return new Map(rows.map((r) => [Number(r.p), Number(r.e)]));
  };
  const danglingOnce = async (): Promise<string[]> => {
    const max = await ledgerMax();
    // A group's epochs below its workflow's group epoch counter have been committed (the counter
    // moves on only after the commit activity returned); asked before XA RECOVER, so a branch
    // counted here was of a committed group epoch when it was listed.
    const groupNext = new Map<number, number>();
    if (grouped) for (let g = 0; g < spec.parallelism!; g++) groupNext.set(g, (await groupStatus(g)).groupEpoch);
    const prepared = await recoverXids(pool, pipelineGtridPrefix(name));
    return prepared
      .filter((x) => {
        const gg = parseGroupGtrid(x.gtrid);
        if (gg !== null) return gg.pipeline === name && gg.groupEpoch < (groupNext.get(gg.group) ?? 0);
        const g = parseGtrid(x.gtrid);
        return g !== null && g.epoch <= (max.get(g.partition) ?? -1);
      })
      .map(xidToString);
  };
  /**
   * Prepared branches of committed epochs still there 3 s later. UNEXPLAINED: without the second
   * look, seed 284101 (short campaign) finds one after a hard Temporal restart — an attempt-1
   * branch of an epoch whose ledger row is committed, gone 3 s later. Branches seen at the first
   * look only are logged (transient) so the mechanism can be found; the check still fails on any
   * branch that stays.
   */
  const danglingNow = async (): Promise<{ stays: string[]; transient: string[] }> => {
    const first = await danglingOnce();
    if (first.length === 0) return { stays: [], transient: [] };
    await sleep(3000);
    const again = new Set(await danglingOnce());
    return { stays: first.filter((x) => again.has(x)), transient: first.filter((x) => !again.has(x)) };
  };
  const retryDb = async <T>(fn: () => Promise<T>): Promise<T> => {
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (e) {
        if (i >= 600) throw e;
        await sleep(200);
      }
    }
  };

  const faults: FaultRecord[] = [];
  let stuck: string | undefined;
  /** The active controller as asked just before a controller kill was armed. */
  let controllerNow: number | undefined;
  const services0 = nodeServices(stack);
  const plan = planFaults({
    seed: o.seed,
    partitions: o.partitions,
    workers: o.workers,
    mode: o.mode,
    randomEach: o.randomEach,
    txnTimeouts: o.txnTimeouts,
    ...(o.splits ? { splits: o.splits } : {}),
    ...(o.soakFaults !== undefined ? { soakFaults: o.soakFaults } : {}),
    ...(o.soakSpacingMs ? { soakSpacingMs: o.soakSpacingMs } : {}),
  });
  log(`pipeline ${name}: ${o.partitions} partitions${grouped ? ` in ${spec.parallelism} groups` : ''}, ${o.workers} workers, ${plan.length} scheduled faults, input ≥ ${o.records} records at ${o.ratePerSecond}/s`);
  let sampleTimer: NodeJS.Timeout | undefined;
  if (o.sampleEveryMs) {
    const take = () =>
      void sample()
        .then((x) => {
          samples.push(x);
          log(`sample: ${JSON.stringify(x)}`);
        })
        .catch((e) => log(`sample failed: ${String(e)}`));
    sampleTimer = setInterval(take, o.sampleEveryMs);
  }
  try {
    await proxies.start();
    workers.start();
    const handle = await startPipeline(client, spec, taskQueue);
    feeder.start();
    await waitFor('every partition to commit a first epoch', async () => (await ledgerMax()).size === o.partitions, 120_000);
    await waitFor('both workers to be ready', async () => ready.size === o.workers, 60_000);

    // A worker freeze is owed liveness from its start only while the other worker is healthy:
    // the next freeze waits until the last one has thawed (seed 20261130 at 2da9e02 froze the
    // second worker while the first was frozen, and fault #22 waited out the first one's thaw).
    let workerThawAt = 0;
    for (const f of plan) {
      const rec: FaultRecord = { ...f, injected: false, affected: [], danglingAfter: 0, note: '' };
      faults.push(rec);
      await sleep(f.delayMs);
      if (f.kind === 'worker-freeze' && Date.now() < workerThawAt) await sleep(workerThawAt - Date.now());
      let t0 = 0;
      let since = '';
      let before = new Map<number, number>();
      let partitions: number[] = [];
      const snapshot = async () => {
        before = await retryDb(ledgerMax);
        since = await retryDb(dbNow);
        t0 = Date.now();
      };

      if (f.trigger === 'random') {
        await snapshot();
        partitions = Array.from({ length: o.partitions }, (_, p) => p);
        // The epoch a transaction coordinator kill names the transactional id by: the partition's next, or its group's.
        const next = grouped && f.kind === 'kafka-txn-coordinator-kill' ? (await retryUntil(() => groupStatus(groupOf(spec, f.partition)), 60_000)).groupEpoch : (before.get(f.partition) ?? -1) + 1;
        const lasts = await inject(f.kind, f.worker, f, rec, next);
        if (f.kind === 'worker-freeze') workerThawAt = Date.now() + FREEZE_MS + 1000;
        rec.faultMs = Math.max(Date.now() - t0, lasts);
        rec.injected = true;
      } else {
        const point = f.trigger;
        const T = o.transactionTimeoutMs;
        for (let tries = 0; tries < 5 && !rec.injected; tries++) {
          // The controller is asked before the epoch is picked and armed (a JVM start, seconds under
          // load: the partition would pass the epoch meanwhile), so the kill follows the hit at once.
          if (f.kind === 'kafka-controller-kill') controllerNow = await quorumLeader(kafkaLibsDir!, settings.kafka.brokers).catch(() => undefined);
          // A grouped pipeline's hits name the group epoch and the group; a partition's name its own epoch.
          const { epoch: e, hitAs } = grouped ? await triggerTarget(f.partition, point) : { epoch: ((await retryDb(ledgerMax)).get(f.partition) ?? -1) + 2, hitAs: [f.partition] };
          const at = (p: number) => `@epoch=${e}@partition=${p}@attempt=1`;
          const action = f.kind === 'worker-kill' ? 'crash' : f.kind === 'worker-freeze' ? `freeze=${FREEZE_MS}` : f.kind === SPLIT_KIND ? `split=${f.n % 2 ? 'markers' : 'outputs'}` : `stall=${HOLD_MS}`;
          const stallPastTimeout = `commit.before${at(grouped ? groupOf(spec, f.partition) : f.partition)}:stall=${T + 4000}`;
          const rules = f.kind === 'txn-timeout' ? [stallPastTimeout] : [...(point === 'redo.start' ? [stallPastTimeout] : []), ...hitAs.map((p) => `${point}${at(p)}:${action}`)];
          arm(rules);
          const hit = await waitLine((l) => l.point === point && l.epoch === e && hitAs.includes(l.partition) && l.attempt === 1, point === 'redo.start' || f.kind === 'txn-timeout' ? T + 60_000 : 45_000);
          arm([]);
          if (!hit) {
            rec.note += `no hit at epoch ${e}; `;
            continue;
          }
          if (point === 'redo.start') evidence.txnTimeoutPrecursors++;
          await snapshot();
          rec.injected = true;
          rec.epoch = e;
          rec.hitWorker = hit.worker;
          if (grouped) rec.group = groupOf(spec, f.partition);
          // A group epoch is every member's: each must progress again.
          partitions = grouped ? membersOf(groupOf(spec, f.partition)) : [f.partition];
          // The other worker is healthy: liveness is owed from the freeze's start, not from the thaw.
          if (f.kind === 'worker-freeze') {
            rec.faultMs = 0;
            workerThawAt = Date.now() + FREEZE_MS + 1000;
          } else if (f.kind === 'txn-timeout') rec.faultMs = T + 4000;
          else if (f.kind === 'worker-kill' || f.kind === SPLIT_KIND) rec.faultMs = 0;
          else {
            const lasts = await inject(f.kind, hit.worker, f, rec, e);
            rec.faultMs = Math.max(Date.now() - t0, lasts);
          }
        }
      }
      if (!rec.injected) {
        log(`#${f.n} ${f.kind} @ ${f.trigger}: NOT injected (${rec.note})`);
        continue;
      }
      rec.at = new Date(t0).toISOString();
      // Recovery: every affected partition committed an epoch that was prepared after the fault.
      let progressed = new Map<number, number>();
      const deadline = t0 + o.recoveryTimeoutMs;
      for (;;) {
        progressed = await progressedSince(since).catch(() => new Map<number, number>());
        if (partitions.every((p) => progressed.has(p))) break;
        if (Date.now() > deadline) break;
        await sleep(200);
      }
      if (!partitions.every((p) => progressed.has(p))) {
        const statuses = await Promise.all(partitions.map((p) => partitionStatus(client, spec, p).then((s) => `partition ${p}: phase ${s.phase}, epoch ${s.state.epoch}, lastError ${s.lastError ?? '-'}`, (e) => `partition ${p}: status query failed (${String(e)})`)));
        stuck = `#${f.n} ${f.kind} @ ${f.trigger}: no progress within ${o.recoveryTimeoutMs} ms after injection at ${rec.at}; ${statuses.join('; ')}`;
        rec.note += stuck;
        log(stuck);
        break;
      }
      rec.recoveryMs = Date.now() - t0;
      rec.affected = partitions.map((p) => ({ partition: p, afterEpoch: before.get(p) ?? -1, throughEpoch: progressed.get(p)! }));
      const dangling = await retryDb(danglingNow);
      rec.danglingAfter = dangling.stays.length;
      if (dangling.transient.length) log(`#${f.n} ${f.kind}: prepared branch of a committed epoch seen once, gone 3 s later (unexplained): ${dangling.transient.join(', ')}`);
      if (dangling.stays.length) {
        rec.note += `prepared branches of committed epochs after recovery: ${dangling.stays.join(', ')}; `;
        log(`#${f.n} ${f.kind}: ${rec.note}`);
      }
      log(`#${f.n}/${plan.length} ${f.kind} @ ${f.trigger}${rec.epoch !== undefined ? ` (${rec.group !== undefined ? `group ${rec.group}` : `partition ${f.partition}`} epoch ${rec.epoch}, worker ${rec.hitWorker})` : ''}: recovered in ${(rec.recoveryMs / 1000).toFixed(1)} s; input ${feeder.produced}${rec.target ? `; ${rec.target}` : ''}`);
      if (nodes > 1) {
        // The next node is killed only once every node is back in every ISR: 2 of 3 live at worst.
        const t = Date.now();
        const topics = [spec.source.topic, spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic, '__transaction_state', '__consumer_offsets'];
        const whole = await waitFor('the cluster to be whole again', () => clusterWhole(admin, nodes, topics), 180_000).then(() => true, () => false);
        rec.wholeAgainMs = Date.now() - t;
        if (!whole) {
          rec.note += 'cluster not whole 180 s after the node came back; ';
          log(`#${f.n}: the cluster was not whole again within 180 s`);
        }
      }
    }
    arm([]);

    if (!stuck) {
      log(`faults done; producing the rest of the input (${Math.max(0, o.records - feeder.produced)} records) and draining`);
      await feeder.finish();
      await controlPipeline(client, name, 'drain');
      let timer: NodeJS.Timeout | undefined;
      const drained = await Promise.race([handle.result().then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 15 * 60_000)))]);
      clearTimeout(timer);
      if (!drained) stuck = 'the pipeline did not drain within 15 minutes';
    } else {
      await feeder.stop();
    }
  } catch (e) {
    // A run that ends here (e.g. no first epoch) must not leave the process hanging on open clients.
    clearInterval(copyTimer);
    await Promise.allSettled([admin.disconnect(), pool.end(), cluster.disconnect(), client.connection.close()]);
    throw e;
  } finally {
    arm([]);
    clearInterval(sampleTimer);
    freezer.thawAll();
    await feeder.stop();
    await workers.stop();
    await proxies.close();
  }

  /** Injects a fault; resolves when the injection returned, with how long the fault lasts from its start (cuts and freezes outlast it). */
  async function inject(kind: PlannedFault['kind'], worker: number, f: PlannedFault, rec?: FaultRecord, epoch?: number): Promise<number> {
    switch (kind) {
      case 'kafka-txn-coordinator-kill':
      case 'kafka-leader-kill':
      case 'kafka-controller-kill': {
        const { node, why } = await clusterTarget(kind, f, epoch ?? 0);
        const service = nodeServices(stack).get(node) ?? services0.get(node) ?? `kafka-${node}`;
        if (rec) {
          rec.node = node;
          rec.target = `node ${node} (${service}): ${why}`;
        }
        await services(stack, ['kill', service]);
        await services(stack, ['up', service]);
        return 0;
      }
      case 'worker-kill':
        workers.kill(worker);
        return 0;
      case 'worker-freeze':
        workers.freeze(worker, FREEZE_MS);
        // Measured from the freeze's start, as at a protocol step: the other worker carries on.
        return 0;
      case 'kafka-restart':
      case 'mariadb-restart':
      case 'temporal-restart':
        await services(stack, ['restart', kind.replace('-restart', '')]);
        return 0;
      case 'kafka-restart-hard':
      case 'mariadb-restart-hard':
      case 'temporal-restart-hard':
        await services(stack, ['restart', kind.replace('-restart-hard', ''), '--hard']);
        return 0;
      case 'kafka-cut':
        proxies.kafka[worker]!.cut(f.cutMs);
        return f.cutMs;
      case 'mysql-cut':
        proxies.mysql[worker]!.cut(f.cutMs);
        return f.cutMs;
      case 'temporal-freeze':
      case 'kafka-freeze':
      case 'mariadb-freeze':
        await freezer.freeze(stack, kind.replace('-freeze', '') as 'temporal' | 'kafka' | 'mariadb', f.freezeMs);
        return f.freezeMs;
      case 'worker-kill+kafka-restart':
        workers.kill(worker);
        await services(stack, ['restart', 'kafka']);
        return 0;
      case 'workers-kill-all':
        for (let i = 0; i < o.workers; i++) workers.kill(i);
        return 0;
      case 'mariadb+temporal-restart':
        await Promise.all([services(stack, ['restart', 'mariadb']), services(stack, ['restart', 'temporal'])]);
        return 0;
      case 'txn-timeout':
      case SPLIT_KIND:
        return 0;
    }
  }

  /**
   * Grouped pipeline: the group epoch a protocol-step fault is armed at — two past the group's
   * counter (the epoch at the counter may already be preparing, inside the commit activity of the
   * one before), like a partition's last committed epoch + 2 — and the partition value its hit
   * carries: the group.
   */
  async function triggerTarget(partition: number, point: FaultPoint): Promise<{ epoch: number; hitAs: number[] }> {
    const g = groupOf(spec, partition);
    const s = await retryUntil(() => groupStatus(g), 60_000);
    void point;
    return { epoch: s.groupEpoch + 2, hitAs: [g] };
  }

  /** The node a cluster kind kills, asked of the cluster at the moment of the fault. */
  async function clusterTarget(kind: ClusterKind, f: PlannedFault, epoch: number): Promise<{ node: number; why: string }> {
    const retry = <T>(fn: () => Promise<T>) => retryUntil(fn, 30_000);
    if (kind === 'kafka-txn-coordinator-kill') {
      const slots = spec.kafkaSink.transactionalIdPool;
      const tid = grouped ? groupTransactionalId(name, groupOf(spec, f.partition), epoch % slots) : transactionalId(name, f.partition, epoch % slots);
      return { node: await retry(() => transactionCoordinator(cluster, tid)), why: `transaction coordinator of ${tid} (epoch ${epoch})` };
    }
    if (kind === 'kafka-leader-kill') {
      // Odd faults hit the source partition's leader, even ones the output partition's.
      const topic = f.n % 2 === 1 ? spec.source.topic : spec.kafkaSink.topic;
      return { node: await retry(() => partitionLeader(admin, topic, f.partition)), why: `leader of ${topic === spec.source.topic ? 'source' : 'output'} ${topic}[${f.partition}]` };
    }
    const asked = controllerNow;
    controllerNow = undefined;
    if (asked !== undefined) return { node: asked, why: 'active KRaft controller (metadata quorum leader)' };
    return { node: await retry(() => quorumLeader(kafkaLibsDir!, settings.kafka.brokers)), why: 'active KRaft controller (metadata quorum leader)' };
  }

  /** What a long run must keep bounded, read from the services and the workers' own reports. */
  async function sample(): Promise<Sample> {
    const history = await Promise.all(
      runnerIds.map(async (id) => {
        const d = await client.workflow.getHandle(id).describe();
        return { events: d.historyLength, bytes: d.historySize ?? 0 };
      }),
    );
    const count = async (sql: string, params: unknown[]) => Number((await pool.query<RowDataPacket[]>(sql, params))[0][0]!.n);
    const tables = [spec.transformOptions!.table as string, 'onceflow_ledger', 'onceflow_staged'];
    const [sizes] = await pool.query<RowDataPacket[]>(
      `SELECT COALESCE(SUM(data_length + index_length), 0) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND (table_name IN (?) OR table_name LIKE 'onceflow_stage%')`,
      [tables],
    );
    const committed = await pool.query<RowDataPacket[]>('SELECT COALESCE(SUM(end_offset), 0) AS n FROM onceflow_ledger l WHERE pipeline = ? AND epoch = (SELECT MAX(epoch) FROM onceflow_ledger WHERE pipeline = l.pipeline AND source_partition = l.source_partition)', [name]);
    let progressRecords = 0;
    for (const x of await admin.fetchTopicOffsets(spec.progressTopic)) progressRecords += Number(x.high) - Number(x.low);
    return {
      atS: Math.round((Date.now() - started) / 1000),
      produced: feeder.produced,
      committedRecords: Number(committed[0][0]!.n),
      workerRssMb: Array.from({ length: o.workers }, (_, i) => (workerStats[i] ? Math.round(workerStats[i]!.rssMb) : null)),
      loopDelayP99Ms: Array.from({ length: o.workers }, (_, i) => (workerStats[i] ? Math.round(workerStats[i]!.loopP99Ms * 10) / 10 : null)),
      historyEvents: history.map((h) => h.events),
      historyBytes: history.map((h) => h.bytes),
      ledgerRows: await count('SELECT COUNT(*) AS n FROM onceflow_ledger WHERE pipeline = ?', [name]),
      stagedRows: await count('SELECT COUNT(*) AS n FROM onceflow_staged WHERE pipeline = ?', [name]),
      tableBytes: Number(sizes[0]!.n),
      progressTopicRecords: progressRecords,
    };
  }

  // ---- verdict
  log('verifying (docs/design.md §8) and auditing every record');
  const verify: VerifyReport = await verifyPipeline({ cluster, admin, pool, transforms: compareTransforms() }, spec);
  clearInterval(copyTimer);
  await ledgerCopy.poll();
  const audit = await auditRecords(cluster, ledgerCopy.spans, spec, o.partitions);
  // The input as it landed, next to what the producer was told (the verdict above uses what landed).
  const input = await feeder.landed(cluster).catch((e) => {
    log(`input count failed: ${String(e)}`);
    return undefined;
  });
  if (input) log(`input: ${input.acked} acknowledged by kafkajs, ${input.inLog} in the source topic, ${input.ackedMissing} acknowledged but not in the log${input.examples.length ? ` (${input.examples.join(', ')})` : ''}, ${input.duplicates} extra copies`);
  // Independent of onceflow's and kafkajs's read path: Kafka's own read_committed consumer.
  const kafkaLibs = toolPaths({ ONCEFLOW_SERVICES_ENV: envFile }).kafkaLibs;
  const javaRead: JavaReadResult | undefined = kafkaLibs ? await javaReadCommitted(kafkaLibs, settings.kafka.brokers, spec, o.partitions, cluster) : undefined;
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
  evidence.workerSigkills = workers.exits.filter((x) => x.signal === 'SIGKILL' && !x.duringStop).length;
  evidence.workerRestarts = workers.starts - o.workers;
  evidence.proxyResets = [...proxies.kafka, ...proxies.mysql].reduce((a, p) => a + p.resets, 0);
  evidence.inputSendRetries = feeder.sendErrors;

  const plannedKinds = new Set<FaultKind>([...plan.map((f) => f.kind), 'sink-throw', 'poison']);
  const kinds = summarize(faults, evidence, audit.totals, plannedKinds);
  const injectedKinds = kinds.filter((k) => k.kind !== 'poison');
  const checks: Check[] = [
    ...verify.checks,
    { name: 'every scheduled fault was injected', ok: faults.length === plan.length && faults.every((f) => f.injected), detail: `${faults.filter((f) => f.injected).length} of ${plan.length}` },
    kindCoverageCheck(kinds, faults, o.mode),
    { name: 'the pipeline recovered after every fault and drained', ok: stuck === undefined, detail: stuck ?? 'yes' },
    (() => {
      const late = faults.filter((f) => f.injected && (afterEndMs(f) ?? Infinity) > o.recoveryBoundMs);
      const worst = Math.max(0, ...faults.map((f) => afterEndMs(f) ?? 0));
      return {
        name: `recovery bound: every affected partition progressed within ${o.recoveryBoundMs / 1000} s after each fault ended`,
        ok: late.length === 0,
        detail: late.length ? late.map((f) => `#${f.n} ${f.kind} @ ${f.trigger}: ${f.recoveryMs === undefined ? 'never' : `${((afterEndMs(f) ?? 0) / 1000).toFixed(1)} s`}`).join('; ') : `longest ${(worst / 1000).toFixed(1)} s`,
      };
    })(),
    { name: 'per-record audit: one output or dead letter per source record', ok: audit.totals.duplicates === 0 && audit.totals.missing === 0, detail: `${audit.totals.records} records, ${audit.totals.duplicates} duplicate(s), ${audit.totals.missing} missing` },
    {
      name: "Kafka's own read_committed consumer (Java) sees each valid record once",
      ok: javaRead !== undefined && javaRead.duplicates === 0 && javaRead.missing === 0 && javaRead.unexpected === 0 && javaRead.records === verify.totals.outputs,
      detail: javaRead ? `${javaRead.records} records, ${javaRead.duplicates} duplicate(s), ${javaRead.missing} missing, ${javaRead.unexpected} unexpected` : 'Kafka jars not found',
    },
    { name: 'poison records dead-lettered once with reason and source coordinates', ok: audit.totals.poison > 0 && audit.totals.deadLetters === audit.totals.poison && audit.totals.deadLettersWithReason === audit.totals.poison, detail: `${audit.totals.poison} poison, ${audit.totals.deadLetters} dead letters, ${audit.totals.deadLettersWithReason} with reason and coordinates` },
    { name: 'no XA branch of a committed epoch left prepared after any recovery', ok: faults.every((f) => f.danglingAfter === 0), detail: `${faults.reduce((a, f) => a + f.danglingAfter, 0)} found` },
    {
      name: 'every forced split was detected and repaired',
      ok: (evidence.kafkaSplits ?? 0) >= (kinds.find((k) => k.kind === SPLIT_KIND)?.injected ?? 0),
      detail: `${kinds.find((k) => k.kind === SPLIT_KIND)?.injected ?? 0} splits forced (${SPLIT_KIND}), ${evidence.kafkaSplits ?? 0} epochs found split by their commit (a group epoch's split counts once per member)`,
    },
    { name: 'the faults really hit', ok: verify.totals.abortedCopies > 0 && evidence.workerSigkills >= (injectedKinds.find((k) => k.kind === 'worker-kill')?.injected ?? 0) && evidence.sinkThrows > 0, detail: `${verify.totals.abortedCopies} aborted copies visible to read_uncommitted, ${evidence.workerSigkills} worker SIGKILLs, ${evidence.sinkThrows} sink throws, ${evidence.redosKafka} Kafka redos` },
    { name: `at least ${o.records} input records`, ok: verify.totals.sourceRecords >= o.records, detail: `${verify.totals.sourceRecords}` },
    // Not onceflow's output: the harness's input producer (kafkajs) against the source topic. The
    // checks above judge the source as it landed; a difference is reported, never failed on.
    {
      name: 'input as it landed (judged above) vs acknowledged by the input producer — a harness/kafkajs finding, not an onceflow check',
      ok: input !== undefined,
      detail: input
        ? `${input.acked} acknowledged, ${input.inLog} in the source topic; ${input.ackedMissing} acknowledged but missing${input.examples.length ? ` (${input.examples.join(', ')})` : ''}, ${input.duplicates} extra copies; per partition ${input.partitions.map((p) => `p${p.partition} ${p.acked}/${p.inLog}`).join(', ')} (acked/in log)`
        : 'the source topic could not be read back',
    },
    ...(o.mode === 'soak' ? boundedStateChecks(samples, o) : []),
  ];
  await Promise.allSettled([admin.disconnect(), pool.end(), cluster.disconnect(), client.connection.close()]);
  const options: Partial<CampaignOptions> = { ...o };
  delete options.log;
  return {
    options: options as Omit<CampaignOptions, 'log'>,
    pipeline: name,
    workflowId: `onceflow/${name}`,
    startedAt: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    produced: feeder.produced,
    faults,
    kinds,
    evidence,
    verify,
    ...(input ? { input } : {}),
    audit: audit.totals,
    ...(javaRead ? { javaRead } : {}),
    samples,
    checks,
    ok: checks.every((c) => c.ok),
  };
}

/**
 * Each planned kind injected at least 5× (every-step, cluster) or once (cover, soak) — or as
 * often as it was scheduled, if that is fewer (the cluster campaign's single stalled commit).
 */
export function kindCoverageCheck(kinds: KindSummary[], faults: Pick<FaultRecord, 'kind'>[], mode: CampaignOptions['mode']): Check {
  const minEach = mode === 'every-step' || mode === 'cluster' ? 5 : 1;
  const scheduled = new Map<FaultKind, number>();
  for (const f of faults) scheduled.set(f.kind, (scheduled.get(f.kind) ?? 0) + 1);
  const planned = kinds.filter((k) => scheduled.has(k.kind) || k.kind === 'sink-throw' || k.kind === 'poison');
  const need = (k: KindSummary) => Math.min(minEach, scheduled.get(k.kind) ?? minEach);
  return {
    name: mode === 'soak' ? 'every planned fault kind injected' : `every fault kind injected at least ${minEach}×`,
    ok: planned.every((k) => k.injected >= need(k)),
    detail: planned.map((k) => `${k.kind} ${k.injected}${need(k) < minEach ? ` (${scheduled.get(k.kind)} scheduled)` : ''}`).join(', '),
  };
}

/** How long after the fault ended its partitions took to progress again. */
export const afterEndMs = (f: FaultRecord): number | undefined => (f.recoveryMs === undefined ? undefined : Math.max(0, f.recoveryMs - (f.faultMs ?? 0)));

const TRIGGER_ORDER: string[] = [...POINTS, 'random'];

function summarize(faults: FaultRecord[], ev: CampaignResult['evidence'], audit: CampaignResult['audit'], planned: Set<FaultKind>): KindSummary[] {
  // The single-node kinds always (their report lists each); the cluster kinds when planned.
  const kinds: FaultKind[] = [...(planned.has(CLUSTER_KINDS[0]) ? CLUSTER_KINDS.filter((k) => planned.has(k)) : INJECTED_KINDS), 'txn-timeout', ...(planned.has(SPLIT_KIND) ? [SPLIT_KIND] : [])];
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
  out.push({ kind: 'sink-throw', injected: ev.sinkThrows, atSteps: 'during prepare, after the batch was written', records: 0, duplicates: 0, missing: 0, dangling: 0, longestRecoveryMs: null, longestAfterEndMs: null });
  out.push({ kind: 'poison', injected: audit.poison, atSteps: 'in the input', records: audit.poison, duplicates: Math.max(0, audit.deadLetters - audit.poison), missing: Math.max(0, audit.poison - audit.deadLetters), dangling: 0, longestRecoveryMs: null, longestAfterEndMs: null });
  return out;
}

async function retryUntil<T>(fn: () => Promise<T>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(500);
    }
  }
}

/** Polls `fn` (an error counts as false) every 250 ms until it is true, for at most `timeoutMs`. */
export async function waitFor(what: string, fn: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await fn().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(250);
  }
}
