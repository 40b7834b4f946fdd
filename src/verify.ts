/**
 * Exactly-once verification of a pipeline against the real services (docs/design.md, "How exactly-once is checked"):
 *  - the read_committed output equals the transform applied once to every committed source
 *    record (same records, no duplicates, none missing, source order per partition);
 *  - the dead-letter topic holds each rejected record once, and the run's dead letters are
 *    within the pipeline's dead-letter budget (counted per reason);
 *  - MySQL tables equal the row operations applied once (tables the pipeline owns alone);
 *  - no XA branch of the pipeline stays prepared;
 *  - no transaction holds back the LSO of an output, dead-letter or progress partition;
 *  - the ledger and the progress markers agree per partition;
 *  - the read_uncommitted view, whose extra copies show the aborted attempts a misconfigured
 *    consumer would see.
 * It assumes the output topics and tables hold only this pipeline's writes.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { partitionCounts } from './kafka/topics';
import type { Admin } from 'kafkajs';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { applyTransform, tableMap } from './activities/apply';
import { budgetOf, deadLettersAllowed } from './activities/budget';
import { readRange } from './activities/source';
import { earliestOffset, fetchPartition, ISOLATION, latestOffset, type KafkaCluster, type RawRecord } from './kafka/internals';
import { lastCommittedMarker } from './kafka/progress';
import { ExpectedTables } from './mysql/expected';
import { recoverXids } from './mysql/branch';
import { lastLedgerRow } from './mysql/ledger';
import { partitionGtridPrefix, pipelineGroupGtridPrefix, pipelineGtridPrefix, xidToString } from './mysql/xid';
import { pendingEpochs } from './mysql/stage';
import { listSources } from './mysql/sources';
import { sourceTopics, type PipelineSpec } from './spec';
import type { TransformRegistry } from './transforms/registry';

/** One source partition (by its source partition id; src/mysql/sources.ts). */
export interface PartitionReport extends OutputCounts {
  partition: number;
  topic: string;
  topicPartition: number;
  sourceEnd: number;
  committedThrough: number | null;
  ledgerEpoch: number | null;
  markerEpoch: number | null;
  /** Outputs the transform gives for the committed records, in whichever output partitions they go to. */
  expectedOutputs: number;
  deadLetters: number;
  expectedDeadLetters: number;
}

/**
 * Output counts. Of a source partition (PartitionReport): `outputs` = its expected outputs found
 * in read_committed, `uncommittedOutputs` = read_uncommitted records of the output partitions it
 * writes to (shared with other source partitions writing there), duplicates and unexpected
 * records 0 (they are counted per output partition), `inOrder` = in source order in each output
 * partition. Of an output partition (OutputReport): as multisets, order per source partition.
 */
interface OutputCounts {
  outputs: number;
  uncommittedOutputs: number;
  duplicates: number;
  missing: number;
  unexpected: number;
  inOrder: boolean;
}

/** One partition of the output topic: expected vs read_committed records, as multisets. */
export interface OutputReport extends OutputCounts {
  partition: number;
  /** Source partition ids whose outputs are expected here. */
  sources: number[];
  expected: number;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** The run's dead letters (read_committed) by reason class, against the budget for the records committed. */
export interface DeadLetterSummary {
  total: number;
  /** Reason class (header onceflow.reason; older dead letters: the text of onceflow.error before its first ':') → count. */
  byReason: Record<string, number>;
  /** Dead letters the budget allows for the run's source records (src/activities/budget.ts). */
  allowed: number;
  maxRatio: number;
}

export interface VerifyReport {
  pipeline: string;
  ok: boolean;
  checks: Check[];
  deadLetters: DeadLetterSummary;
  partitions: PartitionReport[];
  outputs: OutputReport[];
  totals: {
    sourceRecords: number;
    outputs: number;
    uncommittedOutputs: number;
    abortedCopies: number;
    duplicates: number;
    missing: number;
    deadLetters: number;
    preparedXaBranches: number;
    hangingPartitions: number;
  };
}

export async function readAll(cluster: KafkaCluster, topic: string, partition: number, isolation: 0 | 1): Promise<RawRecord[]> {
  const start = await earliestOffset(cluster, topic, partition);
  const end = await latestOffset(cluster, topic, partition, isolation);
  const out: RawRecord[] = [];
  let next = start;
  while (next < end) {
    const r = await fetchPartition(cluster, { topic, partition, fromOffset: next, maxBytes: 4 << 20, maxWaitMs: 100, isolation });
    for (const rec of r.records) if (rec.offset < end) out.push(rec);
    if (r.nextOffset <= next) break;
    next = r.nextOffset;
  }
  return out;
}

const fingerprint = (key: Buffer | string | null | undefined, value: Buffer | string | null) =>
  `${key == null ? '' : Buffer.from(key).toString('base64')}:${value == null ? '' : Buffer.from(value).toString('base64')}`;

function compare(expected: string[], actual: string[]) {
  const counts = new Map<string, number>();
  for (const e of expected) counts.set(e, (counts.get(e) ?? 0) + 1);
  let duplicates = 0;
  let unexpected = 0;
  for (const a of actual) {
    const c = counts.get(a);
    if (c === undefined) unexpected++;
    else if (c <= 0) duplicates++;
    counts.set(a, (c ?? 0) - 1);
  }
  let missing = 0;
  for (const c of counts.values()) if (c > 0) missing += c;
  const inOrder = expected.length === actual.length && expected.every((e, i) => e === actual[i]);
  return { duplicates, missing, unexpected, inOrder };
}

/** A source partition of a pipeline: its id, topic and partition (see pipelineSources). */
export interface PipelineSourcePartition {
  id: number;
  topic: string;
  partition: number;
}

/**
 * The source partitions of a pipeline, as `verify` and `status` see them: the ids assigned by
 * the pipeline's discovery (src/mysql/sources.ts) — every partition workflow it started, on
 * every topic, including partitions added later — or, for a pipeline that never recorded
 * assignments (started before them), the ids the first discovery would assign (for a single
 * topic: id = partition). `goneTopics` are source topics that no longer exist; `unassigned`
 * are partitions of existing source topics that no partition workflow reads (yet).
 */
export async function pipelineSources(deps: { admin: Admin; pool: Pool }, spec: PipelineSpec): Promise<{ sources: PipelineSourcePartition[]; goneTopics: string[]; unassigned: { topic: string; partition: number }[] }> {
  const topics = sourceTopics(spec);
  const counts = await partitionCounts(deps.admin, topics);
  const present = topics.filter((t) => (counts.get(t) ?? 0) > 0);
  let sources: PipelineSourcePartition[] = (await listSources(deps.pool, spec.name)).map(({ id, topic, partition }) => ({ id, topic, partition }));
  if (sources.length === 0) {
    let id = 0;
    sources = present.flatMap((topic) => Array.from({ length: counts.get(topic) ?? 0 }, (_, partition) => ({ id: id++, topic, partition })));
  }
  const known = new Set(sources.map((s) => `${s.topic}\u0000${s.partition}`));
  const unassigned = present.flatMap((topic) => Array.from({ length: counts.get(topic) ?? 0 }, (_, partition) => ({ topic, partition })).filter((x) => !known.has(`${topic}\u0000${x.partition}`)));
  const goneTopics = [...new Set([...topics, ...sources.map((s) => s.topic)])].filter((t) => !(counts.get(t) ?? 0));
  return { sources, goneTopics, unassigned };
}

/** Whether each source partition's expected outputs appear in its order among `actual` (fingerprints shared by several sources are not judged). */
function inSourceOrder(expectedBySource: Map<number, string[]>, actual: string[]): Map<number, boolean> {
  const owners = new Map<string, Set<number>>();
  for (const [id, fps] of expectedBySource) for (const fp of fps) (owners.get(fp) ?? owners.set(fp, new Set()).get(fp)!).add(id);
  const out = new Map<number, boolean>();
  for (const [id, fps] of expectedBySource) {
    const mine = (fp: string) => owners.get(fp)?.size === 1 && owners.get(fp)!.has(id);
    const e = fps.filter(mine);
    const a = actual.filter(mine);
    out.set(id, e.length === a.length && e.every((x, i) => x === a[i]));
  }
  return out;
}

/**
 * Checks a pipeline's run end to end: every committed source record transformed once is in the
 * read_committed output (no duplicate, none missing, source order per partition), the MySQL
 * tables equal the rows applied once, nothing is left prepared or hanging, and the ledger and
 * progress markers agree. Needs the pipeline's transform (it maps the records again).
 * `onProgress` hears each source partition as it is done (verify reads every record).
 */
export async function verifyPipeline(
  deps: { cluster: KafkaCluster; admin: Admin; pool: Pool; transforms: TransformRegistry },
  spec: PipelineSpec,
  onProgress?: (done: number, total: number, partition: string) => void,
): Promise<VerifyReport> {
  const { cluster, admin, pool } = deps;
  const transform = deps.transforms.get(spec.transform, spec.name);
  const tables = tableMap(spec);
  const { sources: all, goneTopics, unassigned } = await pipelineSources(deps, spec);
  const sources = all.filter((s) => !goneTopics.includes(s.topic));
  const counts = await partitionCounts(admin, [spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic]);
  const outputPartitions = counts.get(spec.kafkaSink.topic) ?? 0;
  const deadLetterPartitions = counts.get(spec.deadLetterTopic) ?? 0;
  // The default output partition is id mod the partition count (src/activities/apply.ts); for
  // pipelines started before, that is the source partition whenever their setup check passed.
  const layout = outputPartitions > 0 && deadLetterPartitions > 0 ? { outputPartitions, deadLetterPartitions } : undefined;
  const reports: PartitionReport[] = [];
  const expectedRows = new ExpectedTables();
  /** Expected output fingerprints per output partition and source id, in source order. */
  const expectedOut = new Map<number, Map<number, string[]>>();
  const expectedDl: string[] = [];
  let sourceRecords = 0;
  let hanging = 0;
  const hangingWhere: string[] = [];
  const topicParts: [string, number][] = [
    ...Array.from({ length: outputPartitions }, (_, p): [string, number] => [spec.kafkaSink.topic, p]),
    ...Array.from({ length: deadLetterPartitions }, (_, p): [string, number] => [spec.deadLetterTopic, p]),
    ...all.filter((s) => s.id < (counts.get(spec.progressTopic) ?? 0)).map((s): [string, number] => [spec.progressTopic, s.id]),
  ];

  // EndTxn returns before the transaction markers are written: give the last commits a moment
  // to become visible (LSO = high watermark) before reading; what stays open is reported below.
  for (const [t, p] of topicParts) await settle(cluster, t, p, SETTLE_MS);
  for (const src of sources) {
    const p = src.id;
    const ledger = await lastLedgerRow(pool, spec.name, p);
    const hasProgress = p < (counts.get(spec.progressTopic) ?? 0);
    const marker = hasProgress ? await lastCommittedMarker(cluster, spec.progressTopic, p, await earliestOffset(cluster, spec.progressTopic, p)) : null;
    const committedThrough = ledger?.end ?? null;
    const sourceEnd = await latestOffset(cluster, src.topic, src.partition, ISOLATION.READ_COMMITTED);
    // Everything the pipeline committed, transformed once, is what must be visible.
    const from = await firstEpochStart(pool, spec.name, p);
    const records = committedThrough === null || from === null ? [] : await readRange(cluster, src.topic, src.partition, from, committedThrough, () => undefined);
    sourceRecords += records.length;
    const applied = await applyTransform(spec, transform, records, { pipeline: spec.name, partition: p, epoch: 0, attempt: 0, options: spec.transformOptions ?? {} }, tables, layout);
    for (const op of applied.rows) expectedRows.add(tables.get(op.table)!, p, op.values);
    for (const o of applied.outputs) {
      const byOut = expectedOut.get(o.partition) ?? expectedOut.set(o.partition, new Map()).get(o.partition)!;
      (byOut.get(p) ?? byOut.set(p, []).get(p)!).push(fingerprint(o.key, o.value));
    }
    // Dead letters are compared by source coordinates (their headers carry the epoch, which a redo may not share).
    const dls = applied.deadLetters.map((d) => String(d.headers?.['onceflow.source']));
    expectedDl.push(...dls);
    reports.push({
      partition: p,
      topic: src.topic,
      topicPartition: src.partition,
      sourceEnd,
      committedThrough,
      ledgerEpoch: ledger?.epoch ?? null,
      markerEpoch: marker?.epoch ?? null,
      expectedOutputs: applied.outputs.length,
      outputs: 0,
      uncommittedOutputs: 0,
      duplicates: 0,
      missing: 0,
      unexpected: 0,
      inOrder: true,
      deadLetters: 0,
      expectedDeadLetters: dls.length,
    });
    onProgress?.(reports.length, sources.length, `${src.topic}[${src.partition}]`);
  }
  const reportOf = new Map(reports.map((r) => [r.partition, r]));

  // Per output partition: expected vs read_committed as multisets, and each source's order.
  const outputs: OutputReport[] = [];
  const outParts = [...new Set([...Array.from({ length: outputPartitions }, (_, o) => o), ...expectedOut.keys()])].sort((a, b) => a - b);
  for (const o of outParts) {
    const bySource = expectedOut.get(o) ?? new Map<number, string[]>();
    const exists = o >= 0 && o < outputPartitions;
    // An output partition that does not exist holds nothing: what should be there is missing.
    const committed = exists ? (await readAll(cluster, spec.kafkaSink.topic, o, ISOLATION.READ_COMMITTED)).map((r) => fingerprint(r.key, r.value)) : [];
    const uncommitted = exists ? (await readAll(cluster, spec.kafkaSink.topic, o, ISOLATION.READ_UNCOMMITTED)).length : 0;
    const expected = [...bySource.values()].flat();
    const cmp = compare(expected.slice().sort(), committed.slice().sort());
    const order = inSourceOrder(bySource, committed);
    // Attribute what was found to the source partitions, for their rows of the report.
    const left = new Map<string, number>();
    for (const fp of committed) left.set(fp, (left.get(fp) ?? 0) + 1);
    for (const [id, fps] of [...bySource].sort((a, b) => a[0] - b[0])) {
      const r = reportOf.get(id)!;
      for (const fp of fps) {
        const n = left.get(fp) ?? 0;
        if (n > 0) {
          left.set(fp, n - 1);
          r.outputs++;
        } else r.missing++;
      }
      r.uncommittedOutputs += uncommitted;
      if (!order.get(id)) r.inOrder = false;
    }
    outputs.push({
      partition: o,
      sources: [...bySource.keys()].sort((a, b) => a - b),
      expected: expected.length,
      outputs: committed.length,
      uncommittedOutputs: uncommitted,
      duplicates: cmp.duplicates,
      missing: cmp.missing,
      unexpected: cmp.unexpected,
      inOrder: [...order.values()].every(Boolean),
    });
  }
  const dlRecords: RawRecord[] = [];
  for (let p = 0; p < deadLetterPartitions; p++) dlRecords.push(...(await readAll(cluster, spec.deadLetterTopic, p, ISOLATION.READ_COMMITTED)));
  const dl = dlRecords.map((r) => String(r.headers['onceflow.source'] ?? ''));
  const deadLetters = deadLetterSummary(spec, dlRecords, sourceRecords);
  const dlCmp = compare(expectedDl.sort(), dl.sort());
  for (const r of reports) r.deadLetters = dl.filter((d) => d.startsWith(`${r.topic}/${r.topicPartition}/`)).length;

  for (const [t, p] of topicParts) {
    const hw = await latestOffset(cluster, t, p, ISOLATION.READ_UNCOMMITTED);
    const lso = await latestOffset(cluster, t, p, ISOLATION.READ_COMMITTED);
    if (lso !== hw) {
      hanging++;
      hangingWhere.push(`${t}[${p}] LSO ${lso} < HW ${hw}`);
    }
  }
  const unread: string[] = [];
  for (const u of unassigned) {
    if ((await latestOffset(cluster, u.topic, u.partition, ISOLATION.READ_COMMITTED)) > (await earliestOffset(cluster, u.topic, u.partition))) unread.push(`${u.topic}[${u.partition}]`);
  }

  const prefixes = all.map((s) => partitionGtridPrefix(spec.name, s.id));
  // The partitions' own branches, and those of the pipeline's partition groups (spec.parallelism).
  prefixes.push(pipelineGroupGtridPrefix(spec.name));
  const prepared = (await recoverXids(pool, pipelineGtridPrefix(spec.name))).filter((x) => prefixes.some((pre) => x.gtrid.startsWith(pre)));
  const unapplied = await pendingEpochs(pool, spec.name);
  const tableProblems = await expectedRows.compare(pool, spec.mysqlSink.tables);

  const sumOut = (f: (r: OutputReport) => number) => outputs.reduce((a, r) => a + f(r), 0);
  const totals = {
    sourceRecords,
    outputs: sumOut((r) => r.outputs),
    uncommittedOutputs: sumOut((r) => r.uncommittedOutputs),
    abortedCopies: sumOut((r) => r.uncommittedOutputs - r.outputs),
    duplicates: sumOut((r) => r.duplicates) + dlCmp.duplicates,
    missing: sumOut((r) => r.missing + r.unexpected) + dlCmp.missing + dlCmp.unexpected,
    deadLetters: dl.length,
    preparedXaBranches: prepared.length,
    hangingPartitions: hanging,
  };
  const name = (r: PartitionReport) => (spec.source.topics ? `partition ${r.partition} (${r.topic}[${r.topicPartition}])` : `partition ${r.partition}`);
  const missingWhere = [
    ...outputs.filter((o) => o.missing + o.unexpected > 0).map((o) => `${spec.kafkaSink.topic}[${o.partition}]${o.partition >= outputPartitions ? ' (no such partition)' : ''}: ${o.missing} missing, ${o.unexpected} unexpected`),
    ...(dlCmp.missing + dlCmp.unexpected > 0 ? [`${spec.deadLetterTopic}: ${dlCmp.missing} missing, ${dlCmp.unexpected} unexpected`] : []),
  ];
  const checks: Check[] = [
    {
      name: 'source topics exist',
      ok: goneTopics.length === 0,
      detail: goneTopics.length ? goneTopics.map((t) => `source topic '${t}' does not exist (any more); its partitions cannot be checked`).join('; ') : `${sourceTopics(spec).length} topic(s)`,
    },
    { name: 'no duplicates (read_committed)', ok: totals.duplicates === 0, detail: `${totals.duplicates} duplicate(s)` },
    { name: 'nothing missing (read_committed)', ok: totals.missing === 0, detail: missingWhere.length ? `${totals.missing} missing or unexpected: ${missingWhere.slice(0, 5).join('; ')}` : '0 missing or unexpected' },
    {
      name: 'source order per partition',
      ok: reports.every((r) => r.inOrder),
      detail: reports.filter((r) => !r.inOrder).map((r) => `${name(r)} out of order`).join('; ') || 'in order',
    },
    { name: 'MySQL tables equal the rows applied once', ok: tableProblems.length === 0, detail: tableProblems.slice(0, 5).join('; ') || `${expectedRows.size} row(s) match` },
    {
      name: 'every committed epoch applied to the tables',
      ok: unapplied.length === 0,
      detail: unapplied.map((x) => `partition ${x.partition} epoch ${x.epoch} staged, not applied`).join('; ') || '0 pending',
    },
    { name: 'no prepared XA branch left', ok: prepared.length === 0, detail: prepared.map(xidToString).join(', ') || '0 prepared' },
    { name: 'no transaction holds back the LSO', ok: hanging === 0, detail: hangingWhere.join('; ') || 'LSO = high watermark everywhere' },
    {
      name: 'ledger and progress markers agree',
      ok: reports.every((r) => r.ledgerEpoch === r.markerEpoch),
      detail: reports.filter((r) => r.ledgerEpoch !== r.markerEpoch).map((r) => `${name(r)}: ledger epoch ${r.ledgerEpoch}, marker epoch ${r.markerEpoch}`).join('; ') || 'agree',
    },
    {
      name: 'caught up with the source',
      ok: reports.every((r) => r.committedThrough === null || r.committedThrough === r.sourceEnd) && unread.length === 0,
      detail:
        [
          ...reports.filter((r) => r.committedThrough !== r.sourceEnd).map((r) => `${name(r)}: committed through ${r.committedThrough}, source ends at ${r.sourceEnd}`),
          ...unread.map((u) => `${u}: has records but no partition workflow reads it`),
        ].join('; ') || 'lag 0',
    },
    budgetCheck(deadLetters, sourceRecords),
  ];
  return { pipeline: spec.name, ok: checks.every((c) => c.ok), checks, deadLetters, partitions: reports, outputs, totals };
}

/** Reason class of a dead letter: its onceflow.reason header, else (older runs) the error text before its first ':'. */
const reasonOf = (headers: RawRecord['headers']) => (headers['onceflow.reason'] !== undefined ? String(headers['onceflow.reason']) : String(headers['onceflow.error'] ?? 'unknown').split(':')[0]!.trim());

/** Counts the run's dead letters per reason and the budget's allowance for the run's source records. */
export function deadLetterSummary(spec: PipelineSpec, records: Pick<RawRecord, 'headers'>[], sourceRecords: number): DeadLetterSummary {
  const byReason: Record<string, number> = {};
  for (const r of records) {
    const k = reasonOf(r.headers);
    byReason[k] = (byReason[k] ?? 0) + 1;
  }
  const budget = budgetOf(spec);
  return { total: records.length, byReason, allowed: deadLettersAllowed(budget, sourceRecords, 'run'), maxRatio: budget.maxRatio };
}

/** The check that fails a run whose dead letters exceed the budget. Pure. */
export function budgetCheck(d: DeadLetterSummary, sourceRecords: number): Check {
  return {
    name: 'dead letters within the budget',
    ok: d.total <= d.allowed,
    detail: `${d.total} of ${sourceRecords} source records, at most ${d.allowed} allowed (deadLetter.maxRatio ${d.maxRatio})${d.total > d.allowed ? ': the transform rejects more records than the pipeline allows; fix it, or raise pipeline.deadLetter' : ''}`,
  };
}

const SETTLE_MS = 10_000;

async function settle(cluster: KafkaCluster, topic: string, partition: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const hw = await latestOffset(cluster, topic, partition, ISOLATION.READ_UNCOMMITTED);
    if ((await latestOffset(cluster, topic, partition, ISOLATION.READ_COMMITTED)) >= hw) return;
    await sleep(100);
  }
}

async function firstEpochStart(pool: Pool, pipeline: string, partition: number): Promise<number | null> {
  const [rows] = await pool.execute<RowDataPacket[]>('SELECT start_offset FROM onceflow_ledger WHERE pipeline = ? AND source_partition = ? ORDER BY epoch ASC LIMIT 1', [pipeline, partition]);
  return rows[0] ? Number(rows[0].start_offset) : null;
}
