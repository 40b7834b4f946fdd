/**
 * The orders example: orders as JSON → an enriched event per order, keyed by customer and
 * written to the output partition of that customer; the latest state of each order (a
 * `replace` table) and running totals per customer (an `accumulate` table). A malformed order
 * goes to the dead-letter topic with the reason.
 *
 *   {"id":"o-1","customer":"c-7","items":[{"sku":"a","qty":2,"price":4.5}],"status":"paid"}
 *
 * Options (pipeline.yaml, transformOptions): outputPartitions — how many partitions the output
 * topic has (the customer's partition is a hash of the customer modulo this number);
 * latestTable and totalsTable — the two tables' names (default orders_latest, customer_totals).
 */
import { createHash } from 'node:crypto';
import { defineTransform, TransformRegistry, type SourceRecord, type TransformResult } from 'onceflow';

interface Order {
  id: string;
  customer: string;
  items: { sku: string; qty: number; price: number }[];
  status: string;
}

const STATUSES = ['placed', 'paid', 'shipped', 'cancelled'];

/** Parses and checks one order; the error names the field a producer got wrong. */
export function parseOrder(record: SourceRecord): Order {
  let o: Partial<Order>;
  try {
    o = JSON.parse(record.value?.toString('utf8') ?? 'null') as Partial<Order>;
  } catch {
    throw new Error('order is not JSON');
  }
  if (!o || typeof o !== 'object') throw new Error('order is not a JSON object');
  if (typeof o.id !== 'string' || !o.id) throw new Error("order has no 'id'");
  if (typeof o.customer !== 'string' || !o.customer) throw new Error(`order ${o.id}: no 'customer'`);
  if (!Array.isArray(o.items) || o.items.length === 0)
    throw new Error(`order ${o.id}: 'items' must be a non-empty list`);
  o.items.forEach((it, i) => {
    if (
      typeof it?.sku !== 'string' ||
      !Number.isInteger(it.qty) ||
      it.qty <= 0 ||
      typeof it.price !== 'number' ||
      it.price < 0
    ) {
      throw new Error(`order ${o.id}: items[${i}] needs a sku, a positive integer qty and a price ≥ 0`);
    }
  });
  const status = o.status ?? 'placed';
  if (!STATUSES.includes(status)) throw new Error(`order ${o.id}: status must be one of ${STATUSES.join(', ')}`);
  return { id: o.id, customer: o.customer, items: o.items, status };
}

/** The customer's tier, as a lookup service would answer it (async, and the same every time). */
async function tierOf(customer: string): Promise<'gold' | 'standard'> {
  await new Promise((r) => setImmediate(r));
  return createHash('sha1').update(customer).digest()[0]! < 64 ? 'gold' : 'standard';
}

/** The output partition of a customer: stable, so one customer's events stay in order. */
export const partitionOf = (customer: string, partitions: number) =>
  createHash('sha1').update(customer).digest().readUInt32BE(0) % partitions;

export const orders = defineTransform({
  async map(record, ctx): Promise<TransformResult> {
    const order = parseOrder(record);
    const cents = order.items.reduce((sum, it) => sum + it.qty * Math.round(it.price * 100), 0);
    const partitions = Number(ctx.options.outputPartitions ?? 1);
    const { latestTable = 'orders_latest', totalsTable = 'customer_totals' } = ctx.options as {
      latestTable?: string;
      totalsTable?: string;
    };
    const event = {
      order: order.id,
      customer: order.customer,
      tier: await tierOf(order.customer),
      status: order.status,
      items: order.items.length,
      totalCents: cents,
    };
    return {
      kafka: [
        { key: order.customer, value: JSON.stringify(event), partition: partitionOf(order.customer, partitions) },
      ],
      mysql: [
        {
          table: latestTable,
          values: { order_id: order.id, customer: order.customer, status: order.status, total_cents: cents },
        },
        { table: totalsTable, values: { customer: order.customer, orders: 1, revenue_cents: cents } },
      ],
    };
  },
});

export const transforms = new TransformRegistry().register('orders', orders);
