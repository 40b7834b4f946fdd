/**
 * A per-record audit next to verifyPipeline (docs/design.md §8): every committed source record must
 * have exactly one read_committed output (valid events) or one dead letter carrying the reason
 * and its source coordinates (poison records). Kept per source offset, so duplicates and gaps
 * can be attributed to the epochs a fault touched.
 */
import { spawn } from 'node:child_process';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { ISOLATION, type KafkaCluster } from '../../src/kafka/internals';
import type { PipelineSpec } from '../../src/spec';
import { parseEvent } from '../../examples/flink-compare/transform';
import { readAll } from '../../src/verify';

interface PartitionAudit {
  /** Source offset → true if the record is poison (its transform throws). */
  source: Map<number, boolean>;
  /** Source offset → read_committed outputs (valid) or dead letters (poison) seen. */
  copies: Map<number, number>;
  /** Epoch → [start, end) source offsets, as the campaign copied them from the ledger (which prunes). */
  epochs: Map<number, [number, number]>;
}

export interface RangeStats {
  records: number;
  duplicates: number;
  missing: number;
}

export interface Audit {
  totals: RangeStats & {
    poison: number;
    deadLetters: number;
    deadLettersWithReason: number;
    duplicateInputIds: number;
  };
  /** Stats over the epochs (fromEpoch, toEpoch] of one partition. */
  range(partition: number, fromEpochExclusive: number, toEpochInclusive: number): RangeStats;
}

const header = (h: Record<string, unknown>, k: string) => {
  const v = h[k];
  return v === undefined ? undefined : String(Array.isArray(v) ? v[v.length - 1] : v);
};

/** Epoch → [start, end) source offsets per partition, copied from the ledger while the pipeline ran. */
export type EpochSpans = Map<number, Map<number, [number, number]>>;

/**
 * Copies the ledger's rows as they appear (the ledger keeps only its first and last epochs, see
 * src/mysql/ledger.ts); `poll` every few seconds — far more often than rows are pruned.
 */
export function ledgerCopier(pool: Pool, pipeline: string) {
  const spans: EpochSpans = new Map();
  return {
    spans,
    async poll(): Promise<void> {
      const [rows] = await pool.query<RowDataPacket[]>(
        'SELECT source_partition AS p, epoch, start_offset, end_offset FROM onceflow_ledger WHERE pipeline = ?',
        [pipeline],
      );
      for (const r of rows) {
        const p = Number(r.p);
        if (!spans.has(p)) spans.set(p, new Map());
        spans.get(p)!.set(Number(r.epoch), [Number(r.start_offset), Number(r.end_offset)]);
      }
    },
  };
}

export async function auditRecords(
  cluster: KafkaCluster,
  spans: EpochSpans,
  spec: PipelineSpec,
  partitions: number,
): Promise<Audit> {
  const parts: PartitionAudit[] = [];
  const ids = new Map<string, number>();
  let deadLetters = 0;
  let withReason = 0;
  for (let p = 0; p < partitions; p++) {
    const a: PartitionAudit = { source: new Map(), copies: new Map(), epochs: spans.get(p) ?? new Map() };
    for (const r of await readAll(cluster, spec.source.topic, p, ISOLATION.READ_COMMITTED)) {
      let poison = false;
      try {
        const e = parseEvent(r.value);
        ids.set(e.id, (ids.get(e.id) ?? 0) + 1);
      } catch {
        poison = true;
      }
      a.source.set(r.offset, poison);
    }
    const bump = (o: number) => a.copies.set(o, (a.copies.get(o) ?? 0) + 1);
    for (const r of await readAll(cluster, spec.kafkaSink.topic, p, ISOLATION.READ_COMMITTED)) {
      const src = String((JSON.parse(r.value?.toString('utf8') ?? '{}') as { src?: string }).src ?? '');
      const [sp, so] = src.split(':');
      if (Number(sp) === p) bump(Number(so));
      else bump(-1);
    }
    for (const r of await readAll(cluster, spec.deadLetterTopic, p, ISOLATION.READ_COMMITTED)) {
      deadLetters++;
      const source = header(r.headers, 'onceflow.source') ?? '';
      const reason = header(r.headers, 'onceflow.error') ?? '';
      const m = /^(.*)\/(\d+)\/(\d+)$/.exec(source);
      if (m && m[1] === spec.source.topic && Number(m[2]) === p) bump(Number(m[3]));
      else bump(-1);
      if (m && reason.startsWith('transform failed:')) withReason++;
    }
    parts.push(a);
  }

  const stats = (a: PartitionAudit, inRange: (o: number) => boolean): RangeStats => {
    const s: RangeStats = { records: 0, duplicates: 0, missing: 0 };
    for (const o of a.source.keys()) {
      if (!inRange(o)) continue;
      s.records++;
      const c = a.copies.get(o) ?? 0;
      if (c === 0) s.missing++;
      if (c > 1) s.duplicates += c - 1;
    }
    return s;
  };
  const totals = {
    records: 0,
    duplicates: 0,
    missing: 0,
    poison: 0,
    deadLetters,
    deadLettersWithReason: withReason,
    duplicateInputIds: 0,
  };
  for (const a of parts) {
    const s = stats(a, () => true);
    totals.records += s.records;
    totals.duplicates += s.duplicates;
    totals.missing += s.missing;
    // Copies that point at no source record are "unexpected": count them as duplicates.
    totals.duplicates += [...a.copies].filter(([o]) => !a.source.has(o)).reduce((x, [, c]) => x + c, 0);
    totals.poison += [...a.source.values()].filter(Boolean).length;
  }
  totals.duplicateInputIds = [...ids.values()].filter((c) => c > 1).length;
  return {
    totals,
    range(partition, from, to) {
      const a = parts[partition];
      if (!a) return { records: 0, duplicates: 0, missing: 0 };
      const spans = [...a.epochs].filter(([e]) => e > from && e <= to).map(([, r]) => r);
      return stats(a, (o) => spans.some(([s, e]) => o >= s && o < e));
    },
  };
}

export interface JavaReadResult {
  records: number;
  duplicates: number;
  missing: number;
  unexpected: number;
}

/**
 * An oracle independent of onceflow's (and kafkajs's) read path: Kafka's own console consumer
 * with isolation.level=read_committed reads every output partition, and the `src` coordinates
 * of what it sees are compared with the committed source (one copy per valid record).
 */
export async function javaReadCommitted(
  kafkaLibs: string,
  brokers: string[],
  spec: PipelineSpec,
  partitions: number,
  cluster: KafkaCluster,
): Promise<JavaReadResult> {
  const r: JavaReadResult = { records: 0, duplicates: 0, missing: 0, unexpected: 0 };
  for (let p = 0; p < partitions; p++) {
    const expected = new Set<number>();
    for (const s of await readAll(cluster, spec.source.topic, p, ISOLATION.READ_UNCOMMITTED)) {
      try {
        parseEvent(s.value);
        expected.add(s.offset);
      } catch {
        // poison: dead-lettered, no output
      }
    }
    const lines = await consoleConsume(kafkaLibs, brokers, spec.kafkaSink.topic, p);
    const seen = new Map<number, number>();
    for (const line of lines) {
      r.records++;
      const src = String((JSON.parse(line) as { src?: string }).src ?? '');
      const [sp, so] = src.split(':');
      if (Number(sp) !== p || !expected.has(Number(so))) r.unexpected++;
      else seen.set(Number(so), (seen.get(Number(so)) ?? 0) + 1);
    }
    for (const o of expected) {
      const c = seen.get(o) ?? 0;
      if (c === 0) r.missing++;
      if (c > 1) r.duplicates += c - 1;
    }
  }
  return r;
}

function consoleConsume(kafkaLibs: string, brokers: string[], topic: string, partition: number): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const args = [
      '-Xmx512m',
      '-cp',
      `${kafkaLibs}/*`,
      'org.apache.kafka.tools.consumer.ConsoleConsumer',
      '--bootstrap-server',
      brokers.join(','),
      '--topic',
      topic,
      '--partition',
      String(partition),
      '--offset',
      'earliest',
      '--isolation-level',
      'read_committed',
      '--timeout-ms',
      '5000',
    ];
    const child = spawn('java', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    child.on('error', reject);
    child.on('exit', () => {
      const lines = out.split('\n').filter((l) => l.startsWith('{'));
      if (!/Processed a total of \d+ messages/.test(err))
        reject(new Error(`console consumer on ${topic}[${partition}] did not finish: ${err}`));
      else resolve(lines);
    });
  });
}
