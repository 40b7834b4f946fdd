/**
 * Runs the user transform over a chunk of source records and turns the results into Kafka
 * messages and row operations. A record whose transform throws, or whose rows do not fit the
 * table definitions, goes to the dead-letter topic with the reason, its class and its source
 * coordinates. Used by the prepare, by both redo paths (./source.ts reapply) and by `verify`'s
 * expectation (src/verify/expected.ts), so a redo writes what the prepare wrote and `verify`
 * expects the same; the prepare then judges the result against the dead-letter budget (./budget.ts).
 */
import { OnceflowError, errorMessage } from '../errors';
import { rowProblem, type RowOp } from '../mysql/sink';
import type { PipelineSpec, TableSpec } from '../spec';
import type { SourceRecord, Transform, TransformContext, TransformResult } from '../transforms/registry';

export interface KafkaMessage {
  key?: string | Buffer | null;
  value: string | Buffer | null;
  partition: number;
  headers?: Record<string, string>;
}

/** Short classes of dead-letter reasons (header onceflow.reason), which `verify` counts. */
export type DeadLetterReason =
  'transform-error' | 'no-result' | 'row-mismatch' | 'undeclared-table' | 'bad-output-value' | 'no-output-partition';

/** A record the transform could not turn into outputs and rows. */
export interface RecordFailure {
  record: SourceRecord;
  reason: DeadLetterReason;
  error: string;
}

export interface Applied {
  outputs: KafkaMessage[];
  deadLetters: KafkaMessage[];
  rows: RowOp[];
  processed: { record: SourceRecord; result: TransformResult }[];
  /** The first dead-lettered record, and the first whose rows name a table the pipeline does not declare (a pipeline error: ./budget.ts). */
  firstFailure?: RecordFailure;
  undeclared?: RecordFailure & { table: string };
}

/** A record's problem and its class (caught in applyTransform, never thrown out of it). */
class RecordProblem extends Error {
  constructor(
    readonly reason: DeadLetterReason,
    message: string,
    readonly table?: string,
  ) {
    super(message);
  }
}

export function tableMap(spec: PipelineSpec): Map<string, TableSpec> {
  return new Map(spec.mysqlSink.tables.map((t) => [t.name, t]));
}

/**
 * Partition counts of the sink and dead-letter topics: the default output partition of source
 * partition id i is i mod the count, so each source partition maps to one output partition (its
 * order holds) however many partitions the source has. Without a layout (runs started before),
 * outputs go to the record's own partition number.
 */
export interface OutputLayout {
  outputPartitions: number;
  deadLetterPartitions: number;
}

export function deadLetter(
  spec: PipelineSpec,
  record: SourceRecord,
  epoch: number,
  reason: string,
  partition = record.partition,
  reasonClass?: DeadLetterReason,
): KafkaMessage {
  return {
    key: record.key,
    value: record.value,
    partition,
    headers: {
      ...record.headers,
      'onceflow.error': reason.slice(0, 2000),
      ...(reasonClass ? { 'onceflow.reason': reasonClass } : {}),
      'onceflow.pipeline': spec.name,
      'onceflow.source': `${record.topic}/${record.partition}/${record.offset}`,
      'onceflow.epoch': String(epoch),
    },
  };
}

/** Records whose async transform calls run at once (like the capacity of Flink's async I/O). */
export const ASYNC_TRANSFORM_WINDOW = 64;

const isThenable = (v: unknown): v is PromiseLike<TransformResult> =>
  typeof v === 'object' && v !== null && typeof (v as PromiseLike<unknown>).then === 'function';

type Outcome = { ok: true; result: TransformResult } | { ok: false; error: unknown };

/**
 * The transform's results for `records`, in record order. A synchronous transform runs without
 * a single await; an async one runs up to ASYNC_TRANSFORM_WINDOW records at once.
 */
async function mapAll(transform: Transform, records: SourceRecord[], ctx: TransformContext): Promise<Outcome[]> {
  const outcomes: (Outcome | PromiseLike<TransformResult>)[] = [];
  for (let i = 0; i < records.length; i += ASYNC_TRANSFORM_WINDOW) {
    const window = records
      .slice(i, i + ASYNC_TRANSFORM_WINDOW)
      .map((record): Outcome | PromiseLike<TransformResult> => {
        try {
          const r = transform.map(record, ctx);
          return isThenable(r) ? r : { ok: true, result: r };
        } catch (error) {
          return { ok: false, error };
        }
      });
    outcomes.push(
      ...(window.some(isThenable)
        ? await Promise.all(
            window.map((w) =>
              isThenable(w)
                ? Promise.resolve(w).then(
                    (result): Outcome => ({ ok: true, result }),
                    (error): Outcome => ({ ok: false, error }),
                  )
                : w,
            ),
          )
        : window),
    );
  }
  return outcomes as Outcome[];
}

export async function applyTransform(
  spec: PipelineSpec,
  transform: Transform,
  records: SourceRecord[],
  ctx: TransformContext,
  tables: Map<string, TableSpec>,
  layout?: OutputLayout,
): Promise<Applied> {
  const out: Applied = { outputs: [], deadLetters: [], rows: [], processed: [] };
  // ctx.partition is the source partition id (src/protocol/index.ts, SourceRef).
  const defaultOut = (record: SourceRecord) => (layout ? ctx.partition % layout.outputPartitions : record.partition);
  const deadLetterPartition = (record: SourceRecord) =>
    layout ? ctx.partition % layout.deadLetterPartitions : record.partition;
  const outcomes = await mapAll(transform, records, ctx);
  records.forEach((record, i) => {
    const outcome = outcomes[i]!;
    let result: TransformResult;
    try {
      if (!outcome.ok) throw outcome.error;
      result = outcome.result;
      if (typeof result !== 'object' || result === null)
        throw new RecordProblem('no-result', 'the transform returned no result object ({ kafka?, mysql? })');
      const unknown = (result.mysql ?? []).find((op) => !tables.has(op.table));
      if (unknown) throw new RecordProblem('undeclared-table', rowProblem(unknown, tables)!, unknown.table);
      const problem = (result.mysql ?? []).map((op) => rowProblem(op, tables)).find((p) => p !== null);
      if (problem) throw new RecordProblem('row-mismatch', problem);
      for (const o of result.kafka ?? []) {
        if (o.value !== null && typeof o.value !== 'string' && !Buffer.isBuffer(o.value))
          throw new RecordProblem('bad-output-value', 'output record value must be a string, a Buffer or null');
        if (
          layout &&
          o.partition !== undefined &&
          o.partition !== null &&
          !(Number.isInteger(o.partition) && o.partition >= 0 && o.partition < layout.outputPartitions)
        ) {
          throw new RecordProblem(
            'no-output-partition',
            `output partition ${JSON.stringify(o.partition)} does not exist: '${spec.kafkaSink.topic}' has partitions 0 to ${layout.outputPartitions - 1}`,
          );
        }
      }
    } catch (e) {
      // onceflow's own errors are not the record's fault (a schema registry that is down, a
      // misconfigured output schema): they fail the attempt — retried if retryable — instead of
      // dead-lettering a good record.
      if (e instanceof OnceflowError) throw e;
      const failure: RecordFailure = {
        record,
        reason: e instanceof RecordProblem ? e.reason : 'transform-error',
        error: errorMessage(e),
      };
      out.firstFailure ??= failure;
      if (e instanceof RecordProblem && e.table !== undefined) out.undeclared ??= { ...failure, table: e.table };
      out.deadLetters.push(
        deadLetter(
          spec,
          record,
          ctx.epoch,
          `transform failed: ${failure.error}`,
          deadLetterPartition(record),
          failure.reason,
        ),
      );
      return;
    }
    for (const o of result.kafka ?? []) {
      out.outputs.push({
        key: o.key ?? null,
        value: o.value,
        partition: o.partition ?? defaultOut(record),
        ...(o.headers ? { headers: o.headers } : {}),
      });
    }
    out.rows.push(...(result.mysql ?? []));
    out.processed.push({ record, result });
  });
  return out;
}
