/**
 * `npm run verify -- <pipeline>`: the exactly-once verification for any pipeline, taking its
 * definition from the pipeline's workflow history. Exit code 1 if a check fails.
 */
import { Kafka, logLevel } from 'kafkajs';
import { createPool } from 'mysql2/promise';
import { connectClient, pipelineSpecOf } from '../src/client';
import { loadSettings } from '../src/config';
import { connectCluster } from '../src/kafka/internals';
import { verifyPipeline } from '../src/verify';
import { defaultTransforms } from '../src/worker';
import { printReport } from './report';

async function main() {
  const [pipeline, ...rest] = process.argv.slice(2);
  const json = rest.includes('--json');
  if (!pipeline || pipeline.startsWith('-')) {
    console.error('usage: npm run verify -- <pipeline> [--json]');
    process.exit(2);
  }
  const settings = loadSettings();
  const client = await connectClient(settings);
  const kafka = new Kafka({ brokers: settings.kafka.brokers, clientId: 'onceflow-verify', logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  const pool = createPool({ ...settings.mysql, connectionLimit: 4 });
  try {
    const spec = await pipelineSpecOf(client, pipeline);
    await admin.connect();
    const cluster = await connectCluster({ brokers: settings.kafka.brokers, clientId: 'onceflow-verify' });
    try {
      const report = await verifyPipeline({ cluster, admin, pool, transforms: defaultTransforms() }, spec);
      if (json) console.log(JSON.stringify(report, null, 2));
      else printReport(report);
      process.exitCode = report.ok ? 0 : 1;
    } finally {
      await cluster.disconnect();
    }
  } finally {
    await Promise.allSettled([admin.disconnect(), pool.end(), client.connection.close()]);
  }
}

main().catch((e) => {
  console.error(`verify failed: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
