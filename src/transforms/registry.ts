/**
 * User code of a pipeline: `record → { kafka: output records, mysql: row operations }`.
 * Registered on every worker under a name that the pipeline definition refers to.
 *
 * The transform must be deterministic in what it emits for a record, so that a redo after a
 * broker-aborted transaction writes the same output. A transform that throws for a record
 * sends that record to the dead-letter topic (exactly once, in the epoch's transaction).
 */
import { MissingTransform } from '../errors';
import type { RowOp } from '../mysql/sink';

export interface SourceRecord {
  topic: string;
  partition: number;
  offset: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
  timestamp: string;
}

export interface OutputRecord {
  key?: string | Buffer | null;
  value: string | Buffer | null;
  /**
   * Output partition; default: the source partition's id modulo the output topic's partition
   * count (one output partition per source partition, so its order holds). A partition the
   * output topic does not have dead-letters the record.
   */
  partition?: number;
  headers?: Record<string, string>;
}

export interface TransformResult {
  kafka?: OutputRecord[];
  mysql?: RowOp[];
}

export interface TransformContext {
  pipeline: string;
  partition: number;
  epoch: number;
  /** Activity attempt (1 = first try of this epoch's prepare). */
  attempt: number;
  options: Record<string, unknown>;
}

export interface Transform {
  /**
   * The output of one record. May be async (a lookup, like Flink's async I/O): up to 64 records
   * of an epoch are mapped at once and their results kept in source order. Must be
   * deterministic per record — a redo after a broker-aborted transaction maps the record again
   * and must write what the first prepare wrote; a lookup whose answer changes between the two
   * makes the Kafka and MySQL sides disagree. A thrown error or rejected promise dead-letters
   * the record — except onceflow's own errors (OnceflowError, e.g. SchemaRegistryUnavailable),
   * which fail the epoch's attempt: retried when retryable, failing the pipeline when not.
   */
  map(record: SourceRecord, ctx: TransformContext): TransformResult | Promise<TransformResult>;
  /**
   * Optional extra sink that sees every processed chunk inside prepare, after it was written
   * to Kafka and MySQL. Throwing fails the epoch attempt (like a failing Flink sink): the
   * attempt's writes are rolled back and the epoch is prepared again.
   */
  sink?(
    chunk: { record: SourceRecord; result: TransformResult }[],
    ctx: TransformContext & { writtenInAttempt: number },
  ): void;
}

/**
 * Declares a transform, with its record and result types checked:
 *
 * ```ts
 * export const upper = defineTransform({
 *   map: (record) => ({ kafka: [{ key: record.key, value: String(record.value).toUpperCase() }] }),
 * });
 * ```
 */
export function defineTransform(t: Transform): Transform {
  if (typeof t?.map !== 'function')
    throw new TypeError('defineTransform: a transform needs a map(record, ctx) function');
  return t;
}

/** Transforms by name: what a worker runs, and what `--transforms <module>` exports as `transforms`. */
export class TransformRegistry {
  private readonly transforms = new Map<string, Transform>();

  register(name: string, t: Transform): this {
    if (this.transforms.has(name)) throw new Error(`transform '${name}' is registered twice`);
    this.transforms.set(name, t);
    return this;
  }

  /** The transform `name`; a MissingTransform (not retryable) names the pipeline and the way to register it. */
  get(name: string, pipeline?: string): Transform {
    const t = this.transforms.get(name);
    if (!t) throw new MissingTransform(name, this.names(), pipeline);
    return t;
  }

  names(): string[] {
    return [...this.transforms.keys()];
  }
}
