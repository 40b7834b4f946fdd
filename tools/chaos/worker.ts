/**
 * The fault campaign's worker process: an ordinary onceflow worker (src/worker.ts) whose
 * "compare" sink and activity observer also write one line per event to stderr, so the
 * campaign can count what really happened (sink throws, redos, rolled-back branches, transactions
 * Kafka split), plus a
 * stats line every 30 s (RSS, event-loop delay) for the soak.
 * Faults come from ONCEFLOW_FAULTS / ONCEFLOW_FAULTS_FILE through src/config/, as for any worker;
 * the campaign points ONCEFLOW_KAFKA_BROKERS and ONCEFLOW_MYSQL_PORT at its proxies.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { compareTransform } from '../../examples/flink-compare/transform';
import { TransformRegistry, type Transform } from '../../src/transforms/registry';
import { createOnceflowWorker } from '../../src/worker';

const say = (line: string) => process.stderr.write(`[chaos] ${line} pid=${process.pid}\n`);

const loggedCompare: Transform = {
  map: (record, ctx) => compareTransform.map(record, ctx),
  sink(chunk, ctx) {
    try {
      compareTransform.sink?.(chunk, ctx);
    } catch (e) {
      say(`sink-throw epoch=${ctx.epoch} partition=${ctx.partition} attempt=${ctx.attempt}`);
      throw e;
    }
  },
};

createOnceflowWorker({
  transforms: new TransformRegistry().register('flink-compare', loggedCompare),
  observe: (e) => {
    if (e.kind === 'redo') say(`redo side=${e.side} partition=${e.partition}`);
    else if (e.kind === 'rolled-back') say(`rolled-back xid=${e.xid} partition=${e.partition}`);
    else if (e.kind === 'retry') say(`retry activity=${e.activity} partition=${e.partition}`);
    else if (e.kind === 'split')
      say(
        `split partition=${e.partition} epoch=${e.epoch} producer=${e.split.producerId}/${e.split.producerEpoch} committed=${e.split.committed.join('+')} aborted=${e.split.aborted.join('+')}`,
      );
  },
})
  .then((h) => {
    // What the soak samples: this process's memory and event-loop delay over the last 30 s.
    const loop = monitorEventLoopDelay({ resolution: 20 });
    loop.enable();
    setInterval(() => {
      say(`stats rss=${process.memoryUsage.rss()} loop-p99-ms=${(loop.percentile(99) / 1e6).toFixed(1)}`);
      loop.reset();
    }, 30_000).unref();
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => h.shutdown());
    say('ready');
    return h.run();
  })
  .catch((e) => {
    process.stderr.write(`[chaos] worker failed: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  });
