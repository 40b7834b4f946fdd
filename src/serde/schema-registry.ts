/**
 * Avro, Protobuf or JSON Schema records through a schema registry (Confluent's wire format):
 * {@link withSchemaRegistry} wraps a transform so that it sees decoded source values and returns
 * plain objects, which are encoded with a fixed output schema.
 *
 * The registry client is `SchemaRegistry` of the npm package `@kafkajs/confluent-schema-registry`
 * (an optional peer dependency: install it in your project). onceflow does not import it; it
 * takes any object with the methods of {@link SchemaRegistryClient}.
 *
 * ```ts
 * import { SchemaRegistry } from '@kafkajs/confluent-schema-registry';
 * import { TransformRegistry, withSchemaRegistry } from 'onceflow';
 *
 * const registry = new SchemaRegistry({ host: 'http://registry:8081' });
 * export const transforms = new TransformRegistry().register(
 *   'orders',
 *   withSchemaRegistry<Order, OrderEvent>(registry, {
 *     map: (record) => {
 *       const order = record.value; // an Order, decoded with the schema its bytes name
 *       if (!order) throw new Error('tombstone');
 *       return { kafka: [{ key: order.customer, value: { order: order.id, customer: order.customer } }] };
 *     },
 *   }, { outputValueSchema: { subject: 'order-events-value', version: 1 } }),
 * );
 * ```
 *
 * **Why this stays exactly once.** A redo (a Kafka transaction the broker aborted) and
 * `verifyPipeline` map the source records again, and must produce the bytes the first prepare
 * wrote. A schema id names one schema forever (registries never change the schema behind an id),
 * and so does a version of a subject, so decoding the same bytes gives the same value and
 * encoding the same value with the same id gives the same bytes. The client caches schemas by
 * id, so a worker asks the registry about each id once.
 *
 * **What you must not do.** Do not encode with "the latest version" of a subject, and do not
 * register schemas while encoding (e.g. an `autoRegister`-style serializer, or a
 * `register()` call in `map`): when someone registers a new version mid-pipeline, a redo would
 * encode with another schema than the first prepare, and the Kafka side of an epoch would no
 * longer match its MySQL side. Register new schemas before you deploy, and name them here by
 * id or by subject and version number; changing the output schema is a new deployment.
 * For the same reason, do not clear the client's cache or point it at another registry while
 * a pipeline runs (the ids of one registry mean nothing in another).
 *
 * **Errors.** A record whose value (or key, with `decodeKey`) is not in the wire format, names
 * a schema id the registry does not have, or does not decode with its schema is dead-lettered
 * with the reason (an {@link UndecodableRecord}); so is a record whose output does not fit the
 * output schema. A registry that cannot be reached or answers with an error other than "not
 * found" is not the record's fault: the call is retried (`registryRetries`, with back-off), then
 * fails with {@link SchemaRegistryUnavailable}, a retryable error.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, OnceflowError, errorMessage } from '../errors';
import type { RowOp } from '../mysql/sink';
import type { OutputRecord, SourceRecord, Transform, TransformContext } from '../transforms/registry';

/**
 * The methods of `SchemaRegistry` (`@kafkajs/confluent-schema-registry` ≥ 3.9, the peer range) that onceflow
 * uses. `getRegistryId` is needed only for outputs named by subject and version; `getSchema`,
 * when present, checks output schemas given by id before the first record is mapped.
 */
export interface SchemaRegistryClient {
  decode(buffer: Buffer): Promise<unknown>;
  encode(schemaId: number, payload: unknown): Promise<Buffer>;
  getRegistryId?(subject: string, version: number): Promise<number>;
  getSchema?(schemaId: number): Promise<unknown>;
}

/** A schema by its registry id, or by a subject and a version number (never "latest"). */
export type SchemaRef = number | { subject: string; version: number };

export interface SchemaRegistryOptions {
  /**
   * The schema output values are encoded with. Without it, output values must be strings,
   * Buffers or null, as for a plain transform. A `null` value (a tombstone) is never encoded.
   */
  outputValueSchema?: SchemaRef;
  /** The schema output keys are encoded with; without it, keys are strings, Buffers or null. */
  outputKeySchema?: SchemaRef;
  /** Decode the source record's key too (default false: the key stays a Buffer). */
  decodeKey?: boolean;
  /**
   * Retries of a registry call that failed for a reason other than the record (unreachable,
   * 5xx, 401): default 3, after 250 ms, 500 ms and 1 s. The client's own retries come first.
   */
  registryRetries?: number;
}

/** A source record as the wrapped transform sees it: value (and key, with `decodeKey`) decoded. */
export interface DecodedRecord<V = unknown, K = Buffer> extends Omit<SourceRecord, 'key' | 'value'> {
  /** The decoded key, or the key's bytes without `decodeKey`; null when the record has no key. */
  key: K | null;
  /** The decoded value; null when the record has none (a tombstone). */
  value: V | null;
  /** The record as read from Kafka, bytes undecoded. */
  raw: SourceRecord;
}

/** An output record with a value (and, with `outputKeySchema`, a key) still to be encoded. */
export interface EncodableOutputRecord<Out = unknown, OutKey = string | Buffer> extends Omit<
  OutputRecord,
  'key' | 'value'
> {
  key?: OutKey | null;
  value: Out | null;
}

export interface EncodableResult<Out = unknown, OutKey = string | Buffer> {
  kafka?: EncodableOutputRecord<Out, OutKey>[];
  mysql?: RowOp[];
}

/** The transform {@link withSchemaRegistry} wraps: decoded records in, values to encode out. */
export interface SchemaRegistryTransform<V = unknown, Out = unknown, K = Buffer, OutKey = string | Buffer> {
  /** Same rules as {@link Transform.map}: deterministic per record; throwing dead-letters the record. */
  map(
    record: DecodedRecord<V, K>,
    ctx: TransformContext,
  ): EncodableResult<Out, OutKey> | Promise<EncodableResult<Out, OutKey>>;
  /** Passed through unchanged: sees the records as read and the encoded outputs. */
  sink?: Transform['sink'];
}

/** The record's bytes cannot be decoded (not the wire format, unknown schema id, or not matching its schema). */
export class UndecodableRecord extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'UndecodableRecord';
  }
}

/** The registry could not be asked (unreachable, or an error answer other than "not found"): not the record's fault. */
export class SchemaRegistryUnavailable extends OnceflowError {
  constructor(what: string, cause: unknown) {
    super(`schema registry unavailable while ${what}: ${errorMessage(cause)}`, { retryable: true, cause });
  }
}

/** The HTTP status of a failed registry call (the client's ResponseError), if it was one. */
const statusOf = (e: unknown): number | undefined => {
  const s = (e as { status?: unknown } | null)?.status;
  return typeof s === 'number' ? s : undefined;
};

function checkRef(field: string, ref: SchemaRef | undefined): void {
  if (ref === undefined) return;
  const positiveInt = (n: unknown) => Number.isInteger(n) && (n as number) > 0;
  if (typeof ref === 'number') {
    if (!positiveInt(ref))
      throw new ConfigError(
        `withSchemaRegistry: ${field}`,
        `must be a schema id (a positive integer), got ${JSON.stringify(ref)}`,
      );
    return;
  }
  if (typeof ref !== 'object' || ref === null || typeof ref.subject !== 'string' || ref.subject === '') {
    throw new ConfigError(
      `withSchemaRegistry: ${field}`,
      `must be a schema id or { subject, version }, got ${JSON.stringify(ref)}`,
    );
  }
  if (!positiveInt(ref.version)) {
    throw new ConfigError(
      `withSchemaRegistry: ${field}.version`,
      `must be a version number (a positive integer), got ${JSON.stringify(ref.version)}; "latest" would change under a running pipeline, and a redo must encode with the schema the first attempt used`,
    );
  }
}

/**
 * Wraps `transform` so that it receives source records with their value (and, with
 * `decodeKey`, their key) decoded by `registry.decode`, and returns output values (and keys)
 * that are encoded with `registry.encode(schemaId, value)` for the fixed output schema.
 * See the module documentation for why this keeps a pipeline exactly once, and what you must
 * not do (encode with "latest", register while encoding).
 *
 * - A record whose bytes cannot be decoded, and a record whose output does not fit the output
 *   schema, are dead-lettered with the reason (`schema registry: …`).
 * - Registry failures that are not the record's fault are retried, then raised as
 *   {@link SchemaRegistryUnavailable}.
 * - Records without a value (tombstones) reach the transform with `value: null`; a `null` output
 *   value is written as a tombstone.
 */
export function withSchemaRegistry<V = unknown, Out = unknown, K = Buffer, OutKey = string | Buffer>(
  registry: SchemaRegistryClient,
  transform: SchemaRegistryTransform<V, Out, K, OutKey>,
  options: SchemaRegistryOptions = {},
): Transform {
  if (typeof registry?.decode !== 'function' || typeof registry.encode !== 'function') {
    throw new TypeError(
      'withSchemaRegistry: the registry needs decode(buffer) and encode(schemaId, value) (a SchemaRegistry of @kafkajs/confluent-schema-registry)',
    );
  }
  if (typeof transform?.map !== 'function')
    throw new TypeError('withSchemaRegistry: a transform needs a map(record, ctx) function');
  checkRef('outputValueSchema', options.outputValueSchema);
  checkRef('outputKeySchema', options.outputKeySchema);
  for (const ref of [options.outputValueSchema, options.outputKeySchema]) {
    if (typeof ref === 'object' && typeof registry.getRegistryId !== 'function') {
      throw new TypeError(
        'withSchemaRegistry: an output schema named by subject and version needs registry.getRegistryId(subject, version)',
      );
    }
  }
  const retries = options.registryRetries ?? 3;
  if (!Number.isInteger(retries) || retries < 0)
    throw new ConfigError(
      'withSchemaRegistry: registryRetries',
      `must be an integer ≥ 0, got ${JSON.stringify(retries)}`,
    );

  /**
   * Runs a registry call; `notFound` says what a 404 means ('record': the record's fault,
   * 'config': a configuration error). Errors without an HTTP status (wrong magic byte, bytes that
   * do not fit the schema, a value the schema rejects) come from the record and are not retried.
   */
  async function call<T>(
    what: string,
    fn: () => Promise<T>,
    recordFault: (e: unknown) => Error,
    notFound: 'record' | 'config',
  ): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (e) {
        const status = statusOf(e);
        if (status === undefined || (status === 404 && notFound === 'record')) throw recordFault(e);
        if (status === 404)
          throw new ConfigError(`withSchemaRegistry: ${what}`, `was not found in the registry: ${errorMessage(e)}`);
        if (attempt >= retries) throw new SchemaRegistryUnavailable(what, e);
        await sleep(250 * 2 ** attempt);
      }
    }
  }

  /** The output schema ids, resolved (and checked) once; a failure is retried by the next record. */
  let resolved: Promise<{ value?: number; key?: number }> | undefined;
  const resolveRef = async (field: string, ref: SchemaRef | undefined): Promise<number | undefined> => {
    if (ref === undefined) return undefined;
    if (typeof ref === 'number') {
      if (registry.getSchema)
        await call(
          `fetching ${field} ${ref}`,
          () => registry.getSchema!(ref),
          (e) => e as Error,
          'config',
        );
      return ref;
    }
    const id = await call(
      `resolving ${field} ${ref.subject} version ${ref.version}`,
      () => registry.getRegistryId!(ref.subject, ref.version),
      (e) => e as Error,
      'config',
    );
    if (!Number.isInteger(id) || id <= 0)
      throw new ConfigError(
        `withSchemaRegistry: ${field}`,
        `the registry answered id ${JSON.stringify(id)} for ${ref.subject} version ${ref.version}`,
      );
    return id;
  };
  const outputIds = () =>
    (resolved ??= (async () => ({
      value: await resolveRef('outputValueSchema', options.outputValueSchema),
      key: await resolveRef('outputKeySchema', options.outputKeySchema),
    }))().catch((e: unknown) => {
      resolved = undefined;
      throw e;
    }));

  const decode = (what: 'value' | 'key', bytes: Buffer | null) =>
    bytes === null
      ? Promise.resolve(null)
      : call(
          `decoding the ${what}`,
          () => registry.decode(bytes),
          (e) =>
            new UndecodableRecord(`schema registry: cannot decode the record's ${what}: ${errorMessage(e)}`, {
              cause: e,
            }),
          'record',
        );

  const encode = async (what: string, id: number | undefined, v: unknown): Promise<string | Buffer | null> => {
    if (v === null || v === undefined) return null;
    if (id === undefined) {
      if (typeof v === 'string' || Buffer.isBuffer(v)) return v;
      throw new Error(
        `schema registry: ${what} is ${typeof v}, not a string or Buffer, and no output schema is set for it (withSchemaRegistry's outputValueSchema / outputKeySchema)`,
      );
    }
    return call(
      `encoding ${what}`,
      () => registry.encode(id, v),
      (e) => {
        const paths = (e as { paths?: unknown }).paths;
        const where =
          Array.isArray(paths) && paths.length
            ? ` (at ${paths.map((p) => (Array.isArray(p) ? p.join('.') : String(p))).join(', ')})`
            : '';
        return new Error(`schema registry: ${what} does not fit schema ${id}: ${errorMessage(e)}${where}`, {
          cause: e,
        });
      },
      'record',
    );
  };

  const wrapped: Transform = {
    async map(record, ctx) {
      const ids = await outputIds();
      const [value, key] = await Promise.all([
        decode('value', record.value),
        options.decodeKey ? decode('key', record.key) : Promise.resolve(record.key),
      ]);
      const decoded: DecodedRecord<V, K> = { ...record, key: key as K | null, value: value as V | null, raw: record };
      const result = await transform.map(decoded, ctx);
      if (typeof result !== 'object' || result === null) return result;
      const kafka =
        result.kafka &&
        (await Promise.all(
          result.kafka.map(async (o, i): Promise<OutputRecord> => {
            const [v, k] = await Promise.all([
              encode(`output ${i}'s value`, ids.value, o.value),
              encode(`output ${i}'s key`, ids.key, o.key),
            ]);
            return { ...o, key: k, value: v };
          }),
        ));
      return { ...(kafka ? { kafka } : {}), ...(result.mysql ? { mysql: result.mysql } : {}) };
    },
  };
  if (transform.sink) wrapped.sink = transform.sink.bind(transform);
  return wrapped;
}
