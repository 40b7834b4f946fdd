/**
 * Exactly-once verification of a pipeline against the real services (docs/design.md, "How exactly-once is checked"):
 *  - the read_committed output equals the transform applied once to every committed source
 *    record (same records, no duplicates, none missing, source order per partition);
 *  - the dead-letter topic holds each rejected record once;
 *  - MySQL tables equal the row operations applied once (tables the pipeline owns alone);
 *  - no XA branch of the pipeline stays prepared;
 *  - no transaction holds back the LSO of an output, dead-letter or progress partition;
 *  - the ledger and the progress markers agree per partition;
 *  - the read_uncommitted view, whose extra copies show the aborted attempts a misconfigured
 *    consumer would see.
 * It assumes the output topics and tables hold only this pipeline's writes.
 */
import type { Admin } from 'kafkajs';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { applyTransform, tableMap } from './activities/apply';
import { readRange } from './activities/source';
import { earliestOffset, fetchPartition, ISOLATION, latestOffset, type KafkaCluster, type RawRecord } from './kafka/internals';
import { lastCommittedMarker } from './kafka/progress';
import { quoteIdent, type SqlValue } from './mysql/sink';
import { recoverXids } from './mysql/branch';
import { lastLedgerRow } from './mysql/ledger';
import { partitionGtridPrefix, pipelineGtridPrefix, xidToString } from './mysql/xid';
import { pendingEpochs } from './mysql/stage';
import type { PipelineSpec } from './spec';
import type { TransformRegistry } from './transforms/registry';

export interface PartitionReport {
  partition: number;
  sourceEnd: number;
  committedThrough: number | null;
  ledgerEpoch: number | null;
  markerEpoch: number | null;
  expectedOutputs: number;
  outputs: number;
  uncommittedOutputs: number;
  duplicates: number;
  missing: number;
  unexpected: number;
  inOrder: boolean;
  deadLetters: number;
  expectedDeadLetters: number;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export interface VerifyReport {
  pipeline: string;
  ok: boolean;
  checks: Check[];
  partitions: PartitionReport[];
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

export async function verifyPipeline(deps: { cluster: KafkaCluster; admin: Admin; pool: Pool; transforms: TransformRegistry }, spec: PipelineSpec): Promise<VerifyReport> {
  const { cluster, admin, pool } = deps;
  const transform = deps.transforms.get(spec.transform, spec.name);
  const tables = tableMap(spec);
  const meta = await admin.fetchTopicMetadata({ topics: [spec.source.topic] });
  const partitions = meta.topics[0]?.partitions.length ?? 0;
  const reports: PartitionReport[] = [];
  const expectedRows = new Map<string, Map<string, SqlValue[]>>();
  let sourceRecords = 0;
  let hanging = 0;
  const hangingWhere: string[] = [];

  // EndTxn returns before the transaction markers are written: give the last commits a moment
  // to become visible (LSO = high watermark) before reading; what stays open is reported below.
  for (let p = 0; p < partitions; p++) {
    for (const t of [spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic]) await settle(cluster, t, p, SETTLE_MS);
  }
  for (let p = 0; p < partitions; p++) {
    const ledger = await lastLedgerRow(pool, spec.name, p);
    const marker = await lastCommittedMarker(cluster, spec.progressTopic, p, await earliestOffset(cluster, spec.progressTopic, p));
    const committedThrough = ledger?.end ?? null;
    const sourceEnd = await latestOffset(cluster, spec.source.topic, p, ISOLATION.READ_COMMITTED);
    // Everything the pipeline committed, transformed once, is what must be visible.
    const from = await firstEpochStart(pool, spec.name, p);
    const records = committedThrough === null || from === null ? [] : await readRange(cluster, spec.source.topic, p, from, committedThrough, () => undefined);
    sourceRecords += records.length;
    const applied = await applyTransform(spec, transform, records, { pipeline: spec.name, partition: p, epoch: 0, attempt: 0, options: spec.transformOptions ?? {} }, tables);
    for (const op of applied.rows) applyRow(expectedRows, tables.get(op.table)!, op.values);

    const expectedOut = applied.outputs.filter((o) => o.partition === p).map((o) => fingerprint(o.key, o.value));
    const committedOut = await readAll(cluster, spec.kafkaSink.topic, p, ISOLATION.READ_COMMITTED);
    const uncommittedOut = await readAll(cluster, spec.kafkaSink.topic, p, ISOLATION.READ_UNCOMMITTED);
    const cmp = compare(expectedOut, committedOut.map((r) => fingerprint(r.key, r.value)));
    // Dead letters are compared by source coordinates (their headers carry the epoch, which a redo may not share).
    const expectedDl = applied.deadLetters.map((d) => String(d.headers?.['onceflow.source']));
    const dl = (await readAll(cluster, spec.deadLetterTopic, p, ISOLATION.READ_COMMITTED)).map((r) => String(r.headers['onceflow.source'] ?? ''));
    const dlCmp = compare(expectedDl.sort(), dl.sort());

    for (const t of [spec.kafkaSink.topic, spec.deadLetterTopic, spec.progressTopic]) {
      const hw = await latestOffset(cluster, t, p, ISOLATION.READ_UNCOMMITTED);
      const lso = await latestOffset(cluster, t, p, ISOLATION.READ_COMMITTED);
      if (lso !== hw) {
        hanging++;
        hangingWhere.push(`${t}[${p}] LSO ${lso} < HW ${hw}`);
      }
    }
    reports.push({
      partition: p,
      sourceEnd,
      committedThrough,
      ledgerEpoch: ledger?.epoch ?? null,
      markerEpoch: marker?.epoch ?? null,
      expectedOutputs: expectedOut.length,
      outputs: committedOut.length,
      uncommittedOutputs: uncommittedOut.length,
      duplicates: cmp.duplicates + dlCmp.duplicates,
      missing: cmp.missing + dlCmp.missing,
      unexpected: cmp.unexpected + dlCmp.unexpected,
      inOrder: cmp.inOrder,
      deadLetters: dl.length,
      expectedDeadLetters: expectedDl.length,
    });
  }

  const prepared = (await recoverXids(pool, pipelineGtridPrefix(spec.name))).filter((x) => {
    return Array.from({ length: partitions }, (_, p) => partitionGtridPrefix(spec.name, p)).some((pre) => x.gtrid.startsWith(pre));
  });
  const unapplied = await pendingEpochs(pool, spec.name);
  const tableProblems = await compareTables(pool, spec, expectedRows);

  const sum = (f: (r: PartitionReport) => number) => reports.reduce((a, r) => a + f(r), 0);
  const totals = {
    sourceRecords,
    outputs: sum((r) => r.outputs),
    uncommittedOutputs: sum((r) => r.uncommittedOutputs),
    abortedCopies: sum((r) => r.uncommittedOutputs - r.outputs),
    duplicates: sum((r) => r.duplicates),
    missing: sum((r) => r.missing + r.unexpected),
    deadLetters: sum((r) => r.deadLetters),
    preparedXaBranches: prepared.length,
    hangingPartitions: hanging,
  };
  const checks: Check[] = [
    { name: 'no duplicates (read_committed)', ok: totals.duplicates === 0, detail: `${totals.duplicates} duplicate(s)` },
    { name: 'nothing missing (read_committed)', ok: totals.missing === 0, detail: `${totals.missing} missing or unexpected` },
    { name: 'source order per partition', ok: reports.every((r) => r.inOrder), detail: reports.filter((r) => !r.inOrder).map((r) => `partition ${r.partition} out of order`).join('; ') || 'in order' },
    { name: 'MySQL tables equal the rows applied once', ok: tableProblems.length === 0, detail: tableProblems.slice(0, 5).join('; ') || `${[...expectedRows.values()].reduce((a, m) => a + m.size, 0)} row(s) match` },
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
      detail: reports.filter((r) => r.ledgerEpoch !== r.markerEpoch).map((r) => `partition ${r.partition}: ledger epoch ${r.ledgerEpoch}, marker epoch ${r.markerEpoch}`).join('; ') || 'agree',
    },
    {
      name: 'caught up with the source',
      ok: reports.every((r) => r.committedThrough === null || r.committedThrough === r.sourceEnd) ,
      detail: reports.filter((r) => r.committedThrough !== r.sourceEnd).map((r) => `partition ${r.partition}: committed through ${r.committedThrough}, source ends at ${r.sourceEnd}`).join('; ') || 'lag 0',
    },
  ];
  return { pipeline: spec.name, ok: checks.every((c) => c.ok), checks, partitions: reports, totals };
}

const SETTLE_MS = 10_000;

async function settle(cluster: KafkaCluster, topic: string, partition: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const hw = await latestOffset(cluster, topic, partition, ISOLATION.READ_UNCOMMITTED);
    if ((await latestOffset(cluster, topic, partition, ISOLATION.READ_COMMITTED)) >= hw) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function firstEpochStart(pool: Pool, pipeline: string, partition: number): Promise<number | null> {
  const [rows] = await pool.execute<RowDataPacket[]>('SELECT start_offset FROM onceflow_ledger WHERE pipeline = ? AND source_partition = ? ORDER BY epoch ASC LIMIT 1', [pipeline, partition]);
  return rows[0] ? Number(rows[0].start_offset) : null;
}

function rowKey(t: PipelineSpec['mysqlSink']['tables'][number], values: Record<string, SqlValue>): string {
  const od = t.onDuplicate;
  const keyCols = t.create?.primaryKey ?? t.columns.filter((c) => od.kind === 'ignore' || !od.columns.includes(c));
  return JSON.stringify(keyCols.map((c) => String(values[c])));
}

function applyRow(model: Map<string, Map<string, SqlValue[]>>, t: PipelineSpec['mysqlSink']['tables'][number], values: Record<string, SqlValue>) {
  let rows = model.get(t.name);
  if (!rows) model.set(t.name, (rows = new Map()));
  const k = rowKey(t, values);
  const incoming = t.columns.map((c) => values[c] ?? null);
  const existing = rows.get(k);
  if (!existing) return void rows.set(k, incoming);
  const od = t.onDuplicate;
  if (od.kind === 'ignore') return;
  t.columns.forEach((c, i) => {
    if (!od.columns.includes(c)) return;
    existing[i] = od.kind === 'accumulate' ? Number(existing[i]) + Number(incoming[i]) : incoming[i]!;
  });
}

async function compareTables(pool: Pool, spec: PipelineSpec, model: Map<string, Map<string, SqlValue[]>>): Promise<string[]> {
  const problems: string[] = [];
  for (const t of spec.mysqlSink.tables) {
    const expected = model.get(t.name) ?? new Map<string, SqlValue[]>();
    const [rows] = await pool.query<RowDataPacket[]>(`SELECT ${t.columns.map(quoteIdent).join(', ')} FROM ${quoteIdent(t.name)}`);
    const actual = new Map<string, SqlValue[]>();
    for (const r of rows) {
      const values = Object.fromEntries(t.columns.map((c) => [c, r[c] as SqlValue]));
      actual.set(rowKey(t, values), t.columns.map((c) => values[c] ?? null));
    }
    for (const [k, e] of expected) {
      const a = actual.get(k);
      if (!a) problems.push(`${t.name}: row ${k} missing`);
      else if (a.map(String).join('|') !== e.map(String).join('|')) problems.push(`${t.name}: row ${k} is (${a.join(', ')}), expected (${e.join(', ')})`);
    }
    for (const k of actual.keys()) if (!expected.has(k)) problems.push(`${t.name}: unexpected row ${k}`);
  }
  return problems;
}
