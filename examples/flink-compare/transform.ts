/**
 * The original report's pipeline: JSON events → the same events on an output topic and an
 * accumulate-on-duplicate upsert into `test_two_step_compare(slot_time, key1, key2, key3,
 * indicate)`, plus a "compare" sink that throws after 10 records in some attempts, the way the
 * reporter simulated a failed checkpoint.
 */
import type { TableSpec } from '../../src/spec';
import type { Transform, TransformContext } from '../../src/transforms/registry';

export const COMPARE_TABLE: TableSpec = {
  name: 'test_two_step_compare',
  columns: ['slot_time', 'key1', 'key2', 'key3', 'indicate'],
  onDuplicate: { kind: 'accumulate', columns: ['indicate'] },
  create: {
    columns: {
      slot_time: 'VARCHAR(32) NOT NULL',
      key1: 'VARCHAR(64) NOT NULL',
      key2: 'VARCHAR(64) NOT NULL',
      key3: 'VARCHAR(64) NOT NULL',
      indicate: 'BIGINT NOT NULL',
    },
    primaryKey: ['slot_time', 'key1', 'key2', 'key3'],
  },
};

export interface CompareEvent {
  id: string;
  slot_time: string;
  key1: string;
  key2: string;
  key3: string;
  indicate: number;
}

export interface CompareOptions {
  /** Table to upsert into (default test_two_step_compare). */
  table?: string;
  /** The compare sink throws once this many records were written in one attempt… */
  compareFailAfter?: number;
  /** …on the first attempt of every epoch whose number is ≡ 1 modulo this (0 = never). */
  compareFailEveryNthEpoch?: number;
}

export function parseEvent(value: Buffer | null): CompareEvent {
  if (!value) throw new Error('record has no value (expected a JSON event)');
  let e: unknown;
  try {
    e = JSON.parse(value.toString('utf8'));
  } catch {
    throw new Error('value is not JSON');
  }
  const o = e as Record<string, unknown>;
  for (const k of ['id', 'slot_time', 'key1', 'key2', 'key3'] as const) {
    if (typeof o[k] !== 'string' || (o[k] as string).length === 0)
      throw new Error(`field '${k}' must be a non-empty string`);
  }
  if (typeof o.indicate !== 'number' || !Number.isInteger(o.indicate))
    throw new Error("field 'indicate' must be an integer");
  return o as unknown as CompareEvent;
}

function opts(ctx: TransformContext): CompareOptions {
  return ctx.options as CompareOptions;
}

export const compareTransform: Transform = {
  map(record, ctx) {
    const e = parseEvent(record.value);
    return {
      kafka: [{ key: e.id, value: JSON.stringify({ ...e, src: `${record.partition}:${record.offset}` }) }],
      mysql: [
        {
          table: opts(ctx).table ?? COMPARE_TABLE.name,
          values: { slot_time: e.slot_time, key1: e.key1, key2: e.key2, key3: e.key3, indicate: e.indicate },
        },
      ],
    };
  },
  sink(_chunk, ctx) {
    const o = opts(ctx);
    const n = o.compareFailEveryNthEpoch ?? 0;
    const after = o.compareFailAfter ?? 10;
    if (n > 0 && ctx.attempt === 1 && ctx.epoch % n === 1 % n && ctx.writtenInAttempt > after) {
      throw new Error(
        `compare sink failed after ${after} records (simulated checkpoint failure, epoch ${ctx.epoch}, attempt ${ctx.attempt})`,
      );
    }
  },
};
