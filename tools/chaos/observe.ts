/**
 * What a campaign hears and samples: the workers' stderr lines (fault hits, the evidence that
 * the faults really hit, readiness, memory and event-loop figures) and, in a soak, the sizes a
 * long run must keep bounded.
 */
import type { RowDataPacket } from 'mysql2/promise';
import type { FaultPoint } from '../../src/faults';
import type { CampaignEnv } from './setup';
import type { CampaignResult, Sample } from './types';

/** A worker's line saying a fault rule fired (src/faults.ts). */
export interface FaultLine {
  action: string;
  point: FaultPoint;
  epoch: number;
  partition: number;
  attempt: number;
  pid: number;
  worker: number;
  at: number;
}

const FAULT_RE =
  /^\[faults\] (SIGKILL|throw|stall=\d+|freeze=\d+|split=\w+) at (\S+) epoch=(\d+) partition=(\d+) attempt=(\d+) pid=(\d+)/;
/** The worker's log line of a prepare attempt failed by src/kafka/landed.ts. */
const LANDED_RE =
  /error: ApplicationFailure: (Kafka acknowledged a send without|acknowledged records missing from the log)/;

export type Evidence = Required<CampaignResult['evidence']>;

/** The workers' lines, as a WorkerSupervisor passes them on (`onLine`). */
export class WorkerReports {
  private readonly waiters = new Set<(l: FaultLine) => void>();
  readonly evidence: Evidence = {
    workerSigkills: 0,
    workerRestarts: 0,
    sinkThrows: 0,
    redosKafka: 0,
    kafkaSplits: 0,
    redosMysql: 0,
    rolledBackBranches: 0,
    txnTimeoutPrecursors: 0,
    proxyResets: 0,
    proxyResetsBy: { kafka: 0, mysql: 0 },
    inputSendRetries: 0,
    landedCheckFailures: 0,
  };
  /** Workers that said they are ready. */
  readonly ready = new Set<number>();
  readonly workerStats: ({ rssMb: number; loopP99Ms: number } | undefined)[] = [];

  readonly onLine = (worker: number, line: string): void => {
    const m = FAULT_RE.exec(line);
    if (m) {
      const l: FaultLine = {
        action: m[1]!,
        point: m[2] as FaultPoint,
        epoch: Number(m[3]),
        partition: Number(m[4]),
        attempt: Number(m[5]),
        pid: Number(m[6]),
        worker,
        at: Date.now(),
      };
      for (const w of this.waiters) w(l);
      return;
    }
    const evidence = this.evidence;
    if (LANDED_RE.test(line)) evidence.landedCheckFailures++;
    else if (line.startsWith('[chaos] sink-throw')) evidence.sinkThrows++;
    else if (line.startsWith('[chaos] redo side=kafka')) evidence.redosKafka++;
    else if (line.startsWith('[chaos] redo side=mysql')) evidence.redosMysql++;
    else if (line.startsWith('[chaos] split ')) evidence.kafkaSplits++;
    else if (line.startsWith('[chaos] rolled-back')) evidence.rolledBackBranches++;
    else if (line.startsWith('[chaos] ready')) this.ready.add(worker);
    else if (line.startsWith('[chaos] stats')) {
      const s = /rss=(\d+) loop-p99-ms=([\d.]+)/.exec(line);
      if (s) this.workerStats[worker] = { rssMb: Number(s[1]) / 2 ** 20, loopP99Ms: Number(s[2]) };
    }
  };

  /** The next fault line `pred` accepts, or undefined after `timeoutMs`. */
  waitLine(pred: (l: FaultLine) => boolean, timeoutMs: number): Promise<FaultLine | undefined> {
    return new Promise<FaultLine | undefined>((resolve) => {
      const done = (l: FaultLine | undefined) => {
        this.waiters.delete(w);
        clearTimeout(t);
        resolve(l);
      };
      const w = (l: FaultLine) => pred(l) && done(l);
      const t = setTimeout(() => done(undefined), timeoutMs);
      this.waiters.add(w);
    });
  }
}

/** What a long run must keep bounded, read from the services and the workers' own reports. */
export async function takeSample(
  env: CampaignEnv,
  started: number,
  produced: () => number,
  workerStats: WorkerReports['workerStats'],
): Promise<Sample> {
  const { client, pool, admin, spec, name, o } = env;
  const history = await Promise.all(
    env.runnerIds.map(async (id) => {
      const d = await client.workflow.getHandle(id).describe();
      return { events: d.historyLength, bytes: d.historySize ?? 0 };
    }),
  );
  const count = async (sql: string, params: unknown[]) =>
    Number((await pool.query<RowDataPacket[]>(sql, params))[0][0]!.n);
  const tables = [spec.transformOptions!.table as string, 'onceflow_ledger', 'onceflow_staged'];
  const [sizes] = await pool.query<RowDataPacket[]>(
    `SELECT COALESCE(SUM(data_length + index_length), 0) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND (table_name IN (?) OR table_name LIKE 'onceflow_stage%')`,
    [tables],
  );
  const committed = await pool.query<RowDataPacket[]>(
    'SELECT COALESCE(SUM(end_offset), 0) AS n FROM onceflow_ledger l WHERE pipeline = ? AND epoch = (SELECT MAX(epoch) FROM onceflow_ledger WHERE pipeline = l.pipeline AND source_partition = l.source_partition)',
    [name],
  );
  let progressRecords = 0;
  for (const x of await admin.fetchTopicOffsets(spec.progressTopic)) progressRecords += Number(x.high) - Number(x.low);
  return {
    atS: Math.round((Date.now() - started) / 1000),
    produced: produced(),
    committedRecords: Number(committed[0][0]!.n),
    workerRssMb: Array.from({ length: o.workers }, (_, i) =>
      workerStats[i] ? Math.round(workerStats[i]!.rssMb) : null,
    ),
    loopDelayP99Ms: Array.from({ length: o.workers }, (_, i) =>
      workerStats[i] ? Math.round(workerStats[i]!.loopP99Ms * 10) / 10 : null,
    ),
    historyEvents: history.map((h) => h.events),
    historyBytes: history.map((h) => h.bytes),
    ledgerRows: await count('SELECT COUNT(*) AS n FROM onceflow_ledger WHERE pipeline = ?', [name]),
    stagedRows: await count('SELECT COUNT(*) AS n FROM onceflow_staged WHERE pipeline = ?', [name]),
    tableBytes: Number(sizes[0]!.n),
    progressTopicRecords: progressRecords,
  };
}
