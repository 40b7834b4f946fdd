/**
 * Runs the user transform over a chunk of source records and turns the results into Kafka
 * messages and row operations. A record whose transform throws, or whose rows do not fit the
 * table definitions, goes to the dead-letter topic with the reason and its source coordinates.
 * Used by prepare and by both redo paths, so a redo writes what the prepare wrote.
 */
import { errorMessage } from '../errors';
import { rowProblem, type RowOp } from '../mysql/sink';
import type { PipelineSpec, TableSpec } from '../spec';
import type { SourceRecord, Transform, TransformContext, TransformResult } from '../transforms/registry';

export interface KafkaMessage {
  key?: string | Buffer | null;
  value: string | Buffer | null;
  partition: number;
  headers?: Record<string, string>;
}

export interface Applied {
  outputs: KafkaMessage[];
  deadLetters: KafkaMessage[];
  rows: RowOp[];
  processed: { record: SourceRecord; result: TransformResult }[];
}

export function tableMap(spec: PipelineSpec): Map<string, TableSpec> {
  return new Map(spec.mysqlSink.tables.map((t) => [t.name, t]));
}

export function deadLetter(spec: PipelineSpec, record: SourceRecord, epoch: number, reason: string): KafkaMessage {
  return {
    key: record.key,
    value: record.value,
    partition: record.partition,
    headers: {
      ...record.headers,
      'onceflow.error': reason.slice(0, 2000),
      'onceflow.pipeline': spec.name,
      'onceflow.source': `${record.topic}/${record.partition}/${record.offset}`,
      'onceflow.epoch': String(epoch),
    },
  };
}

export function applyTransform(spec: PipelineSpec, transform: Transform, records: SourceRecord[], ctx: TransformContext, tables: Map<string, TableSpec>): Applied {
  const out: Applied = { outputs: [], deadLetters: [], rows: [], processed: [] };
  for (const record of records) {
    let result: TransformResult;
    try {
      result = transform.map(record, ctx);
      const problem = (result.mysql ?? []).map((op) => rowProblem(op, tables)).find((p) => p !== null);
      if (problem) throw new Error(problem);
      for (const o of result.kafka ?? []) {
        if (o.value !== null && typeof o.value !== 'string' && !Buffer.isBuffer(o.value)) throw new Error('output record value must be a string, a Buffer or null');
      }
    } catch (e) {
      out.deadLetters.push(deadLetter(spec, record, ctx.epoch, `transform failed: ${errorMessage(e)}`));
      continue;
    }
    for (const o of result.kafka ?? []) {
      out.outputs.push({ key: o.key ?? null, value: o.value, partition: o.partition ?? record.partition, ...(o.headers ? { headers: o.headers } : {}) });
    }
    out.rows.push(...(result.mysql ?? []));
    out.processed.push({ record, result });
  }
  return out;
}
