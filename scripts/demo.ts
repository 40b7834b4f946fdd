/**
 * `npm run demo`: the original report's pipeline, run by onceflow.
 * flink_input (4 partitions) → flink_output + test_two_step_compare, with a "compare" sink that
 * throws after 10 records on the first attempt of every third epoch (the reporter's simulated
 * checkpoint failure). Ends with the verification; exit code 1 if any check fails.
 * Shows a progress line and one line per expected failure; the full worker log goes to
 * $ONCEFLOW_RUN_DIR/demo-worker.log (default ~/.cache/onceflow/run; `npm run demo -- --verbose` prints it instead).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startPipeline, controlPipeline, workflowUrl } from '../src/client';
import { loadSettings, runDir } from '../src/config';
import { installWorkerLog, ProgressView } from '../src/cli/progress';
import { openConnections } from '../src/connections';
import { compareSpec, makeEvents, produceValues, resetPipeline, tableSums } from '../examples/flink-compare/scenario';
import { verifyPipeline } from '../src/verify';
import { createOnceflowWorker } from '../src/worker';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { printReport } from '../src/cli/report';

const RECORDS = Number(process.env.DEMO_RECORDS ?? 2000);
const PARTITIONS = 4;

async function main() {
  const settings = loadSettings();
  const verbose = process.argv.includes('--verbose');
  const logFile = join(runDir(), 'demo-worker.log');
  mkdirSync(join(logFile, '..'), { recursive: true });
  writeFileSync(logFile, '');
  installWorkerLog({ logFile, verbose, echo: (l) => console.log(l) });
  const progress = new ProgressView((l) => console.log(l));
  const spec = compareSpec({
    name: 'flink-compare-demo',
    source: { topic: 'flink_input' },
    kafkaSink: { topic: 'flink_output', transactionTimeoutMs: 60_000 },
    epoch: { maxRecords: 100, maxWaitMs: 1000 },
    transformOptions: { compareFailAfter: 10, compareFailEveryNthEpoch: 3 },
  });
  const deps = await openConnections(settings, 'onceflow-demo');
  const { admin, pool, cluster, client } = deps;
  try {
    console.log(
      `onceflow demo: ${RECORDS} events → flink_input (${PARTITIONS} partitions) → flink_output + test_two_step_compare`,
    );
    await client.workflow
      .getHandle(`onceflow/${spec.name}`)
      .terminate('demo restarted')
      .catch(() => undefined);
    await resetPipeline(admin, pool, spec, PARTITIONS);
    const { values, input } = makeEvents(RECORDS, 2019, 500);
    await produceValues(settings.kafka, spec.source.topic, PARTITIONS, values);
    console.log(`produced ${values.length} records (${input.poison} of them poison: not JSON)`);

    const taskQueue = 'onceflow-demo';
    const worker = await createOnceflowWorker({
      settings,
      taskQueue,
      transforms: compareTransforms(),
      observe: progress.observe,
    });
    const running = worker.run();
    const started = Date.now();
    const handle = await startPipeline(client, spec, taskQueue);
    console.log(`started workflow ${handle.workflowId} — watch it at ${workflowUrl(settings, handle.workflowId)}`);
    if (!verbose)
      console.log(`the worker's full log: ${logFile}; expected failures (the compare sink's) show as one line each:`);
    progress.start(2000);
    await controlPipeline(client, spec.name, 'drain');
    const results = await handle.result();
    progress.stop();
    console.log(progress.line());
    worker.shutdown();
    await running;
    const secs = (Date.now() - started) / 1000;
    const epochs = results.reduce((a, r) => a + r.state.committedEpochs, 0);
    console.log(
      `pipeline drained in ${secs.toFixed(1)} s: ${epochs} epochs committed; failed prepare attempts are in the workflow histories`,
    );

    const report = await verifyPipeline({ cluster, admin, pool, transforms: compareTransforms() }, spec);
    // The report's own question, in its terms: MySQL sums per key against the sums of the input.
    const sums = await tableSums(pool, 'test_two_step_compare');
    const wrong =
      [...input.sums].filter(([k, v]) => sums.get(k) !== v).length +
      [...sums.keys()].filter((k) => !input.sums.has(k)).length;
    report.checks.push({
      name: 'MySQL sums per key equal the input sums',
      ok: wrong === 0,
      detail: `${input.sums.size} keys, ${wrong} differ`,
    });
    report.checks.push({
      name: 'poison records dead-lettered once',
      ok: report.totals.deadLetters === input.poison,
      detail: `${report.totals.deadLetters} of ${input.poison}`,
    });
    report.ok = report.checks.every((c) => c.ok);
    printReport(report);
    console.log(
      `\nA consumer with isolation.level=read_uncommitted would see ${report.totals.uncommittedOutputs} records on flink_output: ` +
        `the ${report.totals.abortedCopies} extra are aborted copies from the failed attempts — the "duplicates" of the original report. ` +
        'Read onceflow output with isolation.level=read_committed.',
    );
    process.exitCode = report.ok ? 0 : 1;
  } finally {
    await deps.close();
  }
}

main().catch((e) => {
  console.error(`demo failed: ${e instanceof Error ? e.stack : String(e)}`);
  process.exit(1);
});
