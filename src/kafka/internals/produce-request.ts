/**
 * The Produce request of our transactions, its body written into one buffer.
 *
 * kafkajs encodes a Produce request (protocol/requests/produce/v3/request.js, which versions 4-7
 * reuse) record by record: each record in an encoder of its own (a zero-filled 512-byte buffer),
 * its timestamp delta through Long objects, its varints through a fresh array and Buffer, and the
 * batch copied three times on its way into the request: 6-7 µs of CPU per record sent
 * (tools/bench/sends-probe.ts; 0.9 here). Here each partition's record batch is measured
 * first, then written once into a buffer of the request body's size; the bytes are the same as
 * kafkajs's (test/unit.test.ts compares them), the CRC is kafkajs's own.
 *
 * Only our transactions' sends use it (`withFastProduce` on the cluster their message producer
 * is given: ./transaction); the request object, its version and its response decoder stay
 * kafkajs's, and a compressed send or a broker older than Produce v3 keeps kafkajs's encoding.
 */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */

const Long = require('kafkajs/src/utils/long');
const Encoder = require('kafkajs/src/protocol/encoder');
const crc32C = require('kafkajs/src/protocol/recordBatch/crc32C');
const apiKeys = require('kafkajs/src/protocol/requests/apiKeys');
const { requests } = require('kafkajs/src/protocol/requests');

type Bytes = string | Buffer | null | undefined;

export interface ProduceMessage {
  key?: Bytes;
  value: Bytes;
  headers?: Record<string, Bytes | Bytes[]>;
  timestamp?: string | number;
}

export interface ProduceArgs {
  transactionalId?: string | null;
  acks: number;
  timeout: number;
  producerId?: unknown;
  producerEpoch?: number;
  compression?: number;
  topicData: {
    topic: string;
    partitions: { partition: number; firstSequence?: number; messages: ProduceMessage[] }[];
  }[];
}

const MAGIC = 2;
const TRANSACTIONAL = 16;
/** FirstOffset, Length, PartitionLeaderEpoch, Magic, CRC: the batch header before the CRC'd part. */
const BATCH_HEAD = 8 + 4 + 4 + 1 + 4;
/** Attributes … FirstSequence, then the record count. */
const BATCH_BODY_HEAD = 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4;

const zigzag = (v: number) => ((v << 1) ^ (v >> 31)) >>> 0;
/** Zigzag of a 64-bit value held in a safe integer (a timestamp delta). */
const zigzag64 = (v: number) => (v >= 0 ? v * 2 : -v * 2 - 1);

function varIntSize(v: number): number {
  let u = zigzag(v);
  let n = 1;
  while (u > 0x7f) {
    n++;
    u >>>= 7;
  }
  return n;
}

function varLongSize(v: number): number {
  let z = zigzag64(v);
  let n = 1;
  while (z > 0x7f) {
    n++;
    z = Math.floor(z / 128);
  }
  return n;
}

const byteLength = (v: Bytes) =>
  v == null ? -1 : Buffer.isBuffer(v) ? v.length : Buffer.byteLength(String(v), 'utf8');
const bytesSize = (len: number) => varIntSize(len) + Math.max(len, 0);

function headerList(h: ProduceMessage['headers']): [string, Bytes][] {
  if (!h) return [];
  const out: [string, Bytes][] = [];
  for (const k of Object.keys(h)) {
    const v = h[k];
    if (Array.isArray(v)) for (const x of v) out.push([k, x]);
    else out.push([k, v]);
  }
  return out;
}

class Writer {
  o = 0;
  constructor(readonly buf: Buffer) {}
  int8(v: number) {
    this.buf.writeInt8(v, this.o);
    this.o += 1;
  }
  int16(v: number) {
    this.buf.writeInt16BE(v, this.o);
    this.o += 2;
  }
  int32(v: number) {
    this.buf.writeInt32BE(v, this.o);
    this.o += 4;
  }
  int64(v: unknown) {
    const l = Long.fromValue(v);
    this.buf.writeInt32BE(l.getHighBits(), this.o);
    this.buf.writeInt32BE(l.getLowBits(), this.o + 4);
    this.o += 8;
  }
  varInt(v: number) {
    let u = zigzag(v);
    while (u > 0x7f) {
      this.buf[this.o++] = (u & 0x7f) | 0x80;
      u >>>= 7;
    }
    this.buf[this.o++] = u;
  }
  varLong(v: number) {
    let z = zigzag64(v);
    while (z > 0x7f) {
      this.buf[this.o++] = (z % 128) | 0x80;
      z = Math.floor(z / 128);
    }
    this.buf[this.o++] = z;
  }
  string(v: string | null | undefined) {
    if (v == null) return this.int16(-1);
    const n = Buffer.byteLength(v, 'utf8');
    this.int16(n);
    this.o += this.buf.write(v, this.o, n, 'utf8');
  }
  /** Bytes whose length (`len`, -1 for null) was measured before. */
  varBytes(v: Bytes, len: number) {
    this.varInt(len);
    if (len <= 0) return;
    if (Buffer.isBuffer(v)) this.o += v.copy(this.buf, this.o);
    else this.o += this.buf.write(String(v), this.o, len, 'utf8');
  }
}

/** One partition's record batch measured: each record's body size and its key's and value's lengths. */
interface Measured {
  firstTs: number;
  maxTs: number;
  now: number;
  keyLen: Int32Array;
  valueLen: Int32Array;
  bodySize: Int32Array;
  headers: ([string, Bytes][] | undefined)[];
  /** The whole record set: FirstOffset through the last record. */
  size: number;
}

const timestampOf = (m: ProduceMessage, now: number) => (m.timestamp == null ? now : Number(m.timestamp));

function measure(messages: ProduceMessage[]): Measured {
  const now = Date.now();
  const n = messages.length;
  // As kafkajs: the smallest and the largest timestamp of the messages that carry one, else now
  // (kafkajs sorts them as strings: the same order for timestamps of one length).
  let firstTs = Infinity;
  let maxTs = -Infinity;
  for (const m of messages) {
    if (m.timestamp == null) continue;
    const t = Number(m.timestamp);
    if (t < firstTs) firstTs = t;
    if (t > maxTs) maxTs = t;
  }
  if (firstTs === Infinity) firstTs = maxTs = now;
  const keyLen = new Int32Array(n);
  const valueLen = new Int32Array(n);
  const bodySize = new Int32Array(n);
  const headers: Measured['headers'] = new Array(n);
  let size = BATCH_HEAD + BATCH_BODY_HEAD;
  for (let i = 0; i < n; i++) {
    const m = messages[i]!;
    keyLen[i] = byteLength(m.key);
    valueLen[i] = byteLength(m.value);
    const hs = m.headers ? headerList(m.headers) : undefined;
    headers[i] = hs;
    let hSize = varIntSize(hs?.length ?? 0);
    if (hs) for (const [k, v] of hs) hSize += bytesSize(Buffer.byteLength(k, 'utf8')) + bytesSize(byteLength(v));
    const body =
      1 +
      varLongSize(timestampOf(m, now) - firstTs) +
      varIntSize(i) +
      bytesSize(keyLen[i]!) +
      bytesSize(valueLen[i]!) +
      hSize;
    bodySize[i] = body;
    size += varIntSize(body) + body;
  }
  return { firstTs, maxTs, now, keyLen, valueLen, bodySize, headers, size };
}

function writeBatch(
  w: Writer,
  messages: ProduceMessage[],
  m: Measured,
  args: ProduceArgs,
  firstSequence: number,
): void {
  const start = w.o;
  w.int64(0); // FirstOffset
  w.int32(m.size - 12); // Length: what follows it
  w.int32(0); // PartitionLeaderEpoch
  w.int8(MAGIC);
  const crcAt = w.o;
  w.o += 4;
  const body = w.o;
  w.int16(args.transactionalId ? TRANSACTIONAL : 0);
  w.int32(messages.length - 1);
  w.int64(m.firstTs);
  w.int64(m.maxTs);
  w.int64(args.producerId ?? -1);
  w.int16(args.producerEpoch ?? 0);
  w.int32(firstSequence);
  w.int32(messages.length);
  for (let i = 0; i < messages.length; i++) {
    const msg = messages[i]!;
    w.varInt(m.bodySize[i]!);
    w.int8(0);
    w.varLong(timestampOf(msg, m.now) - m.firstTs);
    w.varInt(i);
    w.varBytes(msg.key, m.keyLen[i]!);
    w.varBytes(msg.value, m.valueLen[i]!);
    const hs = m.headers[i];
    w.varInt(hs?.length ?? 0);
    if (hs)
      for (const [k, v] of hs) {
        w.varBytes(k, Buffer.byteLength(k, 'utf8'));
        w.varBytes(v, byteLength(v));
      }
  }
  if (w.o - start !== m.size) throw new Error(`record batch of ${m.size} bytes measured, ${w.o - start} written`);
  w.buf.writeUInt32BE(crc32C(w.buf.subarray(body, w.o)), crcAt);
}

/** The Produce request body (versions 3-7), uncompressed, as kafkajs would encode it. */
export function encodeProduce(args: ProduceArgs): Buffer {
  const tid = args.transactionalId ?? null;
  let size = 2 + (tid == null ? 0 : Buffer.byteLength(tid, 'utf8')) + 2 + 4 + 4;
  const measured = args.topicData.map((t) => {
    size += 2 + Buffer.byteLength(t.topic, 'utf8') + 4;
    return t.partitions.map((p) => {
      const m = measure(p.messages);
      size += 4 + 4 + m.size;
      return m;
    });
  });
  const w = new Writer(Buffer.allocUnsafe(size));
  w.string(tid);
  w.int16(args.acks);
  w.int32(args.timeout);
  w.int32(args.topicData.length);
  args.topicData.forEach((t, ti) => {
    w.string(t.topic);
    w.int32(t.partitions.length);
    t.partitions.forEach((p, pi) => {
      const m = measured[ti]![pi]!;
      w.int32(p.partition);
      w.int32(m.size);
      writeBatch(w, p.messages, m, args, p.firstSequence ?? 0);
    });
  });
  if (w.o !== size) throw new Error(`Produce request of ${size} bytes measured, ${w.o} written`);
  return w.buf;
}

/** An encoder (what kafkajs's request framing takes) holding `buf` as written. */
function asEncoder(buf: Buffer): any {
  const e = new Encoder(1);
  e.buf = buf;
  e.offset = buf.length;
  return e;
}

/**
 * `broker.produce` with the body from encodeProduce. kafkajs's private send also disconnects the
 * broker when its connection closed (so that the next request reconnects); so does this.
 */
async function produce(broker: any, a: Partial<ProduceArgs> & Pick<ProduceArgs, 'topicData'>): Promise<unknown> {
  const args: ProduceArgs = { ...a, acks: a.acks ?? -1, timeout: a.timeout ?? 30000, compression: a.compression ?? 0 };
  const protocol = broker.lookupRequest(apiKeys.Produce, requests.Produce)(args);
  if (protocol.request.apiVersion >= 3 && args.compression === 0) {
    protocol.request.encode = async () => asEncoder(encodeProduce(args));
  }
  try {
    return await broker.connectionPool.send(protocol);
  } catch (e) {
    if ((e as Error).name === 'KafkaJSConnectionClosedError') await broker.disconnect();
    throw e;
  }
}

/** Forwards everything to `target` (methods bound to it), but what `own` names. */
function forward<T extends object>(target: T, own: Record<string, unknown>): T {
  return new Proxy(target, {
    get(t, prop) {
      if (typeof prop === 'string' && prop in own) return own[prop];
      const v = Reflect.get(t, prop, t);
      return typeof v === 'function' ? v.bind(t) : v;
    },
  });
}

const fastBrokers = new WeakMap<object, object>();

/** The kafkajs cluster `raw`, its brokers' produce using encodeProduce (one wrapper per broker: kafkajs keys maps by them). */
export function withFastProduce(raw: any): any {
  const fastBroker = (broker: any) => {
    let b = fastBrokers.get(broker);
    if (!b) fastBrokers.set(broker, (b = forward(broker, { produce: (a: ProduceArgs) => produce(broker, a) })));
    return b;
  };
  return forward(raw, { findBroker: async (q: unknown) => fastBroker(await raw.findBroker(q)) });
}
