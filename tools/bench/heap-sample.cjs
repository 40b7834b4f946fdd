/**
 * Preloaded (`node --require`) into every engine process when BENCH_HEAP_SAMPLE=<dir> is set
 * (tools/bench/run.ts): V8's sampling heap profiler, counting by allocation site only the objects
 * that outlived the young generation — promoted, then collected by a major GC or still alive at
 * the end. What an engine keeps alive through a scavenge is what V8's helper threads copy and
 * then mark. At exit it writes <dir>/<time>-<pid>.heapprofile (the format of Chrome DevTools'
 * Memory tab: a tree of call frames, each with the bytes sampled there as selfSize).
 */
'use strict';
const inspector = require('node:inspector');
const { mkdirSync, writeFileSync } = require('node:fs');
const { join } = require('node:path');

const dir = process.env.BENCH_HEAP_SAMPLE;
if (dir) {
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.enable');
  session.post('HeapProfiler.startSampling', {
    samplingInterval: 16384,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: false,
  });
  // A session on the process's own thread answers synchronously, so this runs within 'exit'.
  process.on('exit', () => {
    session.post('HeapProfiler.stopSampling', (err, result) => {
      if (err) return;
      mkdirSync(dir, { recursive: true });
      const at = new Date().toISOString().replace(/[:.]/g, '-');
      writeFileSync(join(dir, `${at}-${process.pid}.heapprofile`), JSON.stringify(result.profile));
    });
  });
}
