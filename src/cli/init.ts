/**
 * `onceflow init <dir>`: scaffolds a project of one's own — a transform, its unit test, a
 * pipeline definition and a README with the project's two commands (`npm test`, `npm start`).
 */
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { ConfigError } from '../errors';

/** A pipeline name from a directory name: lower case, [a-z0-9._-], at most 40 characters. */
export function projectName(dir: string): string {
  const n = basename(resolve(dir))
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[^a-z0-9]+/, '')
    .slice(0, 40);
  return n || 'my-pipeline';
}

export function scaffold(name: string, onceflowDependency: string): Record<string, string> {
  const table = `${name.replace(/[^a-z0-9]+/g, '_')}_word_counts`.replace(/^_+/, '').slice(0, 64);
  const pkg = {
    name,
    version: '0.1.0',
    private: true,
    scripts: {
      test: 'node --import tsx --test test/*.test.ts',
      start: 'onceflow run pipeline.yaml --transforms src/transforms.ts',
      verify: `onceflow verify ${name} --transforms src/transforms.ts`,
    },
    dependencies: { onceflow: onceflowDependency },
    devDependencies: { tsx: '^4.19.0' },
  };
  return {
    'package.json': `${JSON.stringify(pkg, null, 2)}\n`,
    'src/transforms.ts': `/**
 * This project's transforms. \`onceflow run|worker|verify --transforms src/transforms.ts\` loads
 * the exported \`transforms\`; the pipeline names one of them in its 'transform' field.
 *
 * A transform must be deterministic per record: onceflow may map a record again (a redo after
 * the broker aborted a transaction) and must then write exactly what it wrote the first time.
 * It may be async (e.g. a lookup), and a record it throws on goes to the dead-letter topic.
 */
import { defineTransform, TransformRegistry } from 'onceflow';

/** Each line of text → the line in upper case (keyed by its first word) + a count per word. */
export const words = defineTransform({
  map(record) {
    const line = record.value?.toString('utf8').trim() ?? '';
    if (!line) throw new Error('empty line');
    const found = line.toLowerCase().match(/[a-z0-9']+/g) ?? [];
    return {
      kafka: [{ key: found[0] ?? null, value: line.toUpperCase() }],
      mysql: found.map((word) => ({ table: '${table}', values: { word, n: 1 } })),
    };
  },
});

export const transforms = new TransformRegistry().register('words', words);
`,
    'test/transforms.test.ts': `import { test } from 'node:test';
import assert from 'node:assert/strict';
import { words } from '../src/transforms';

const record = (value: string | null) => ({ topic: 'in', partition: 0, offset: 0, key: null, value: value === null ? null : Buffer.from(value), headers: {}, timestamp: '0' });
const ctx = { pipeline: 't', partition: 0, epoch: 1, attempt: 1, options: {} };

test('a line becomes its upper case and one count per word', async () => {
  const out = await words.map(record('Hello hello world'), ctx);
  assert.deepEqual(out.kafka, [{ key: 'hello', value: 'HELLO HELLO WORLD' }]);
  assert.deepEqual(out.mysql?.map((op) => op.values.word), ['hello', 'hello', 'world']);
});

test('an empty record is rejected (and so dead-lettered by onceflow)', async () => {
  await assert.rejects(async () => words.map(record(null), ctx), /empty line/);
});
`,
    'pipeline.yaml': `# The pipeline this project runs:  npm start   (onceflow run pipeline.yaml --transforms src/transforms.ts)
pipeline:
  name: ${name}
  source:
    topic: ${name}.input
  transform: words
  kafkaSink:
    topic: ${name}.output
  mysqlSink:
    tables:
      - name: ${table}
        columns: [word, n]
        onDuplicate: { kind: accumulate, columns: [n] }
        create:
          columns:
            word: VARCHAR(128) NOT NULL
            n: BIGINT NOT NULL
          primaryKey: [word]
  epoch:
    maxRecords: 1000
    maxWaitMs: 500
taskQueue: ${name}
`,
    'README.md': `# ${name}

An [onceflow](https://www.npmjs.com/package/onceflow) pipeline: lines of text from the Kafka topic
\`${name}.input\` → upper-cased lines in \`${name}.output\` and a count per word in the MySQL table
\`${table}\`, exactly once.

    npm test     # the transform's unit tests
    npm start    # a worker and the pipeline; Ctrl-C stops the worker, the pipeline waits for the next

\`npm start\` needs a Temporal server, Kafka and MySQL/MariaDB. Point onceflow at them with
\`ONCEFLOW_TEMPORAL_ADDRESS\`, \`ONCEFLOW_KAFKA_BROKERS\`, \`ONCEFLOW_MYSQL_HOST\`, \`ONCEFLOW_MYSQL_USER\`,
\`ONCEFLOW_MYSQL_DATABASE\` and \`ONCEFLOW_MYSQL_PASSWORD\` (or a \`connections\` section in
pipeline.yaml). The source topic must exist; the output topics and the table are created.

- \`npx onceflow status ${name}\` shows each partition's epoch, lag and last error.
- \`npx onceflow run pipeline.yaml --transforms src/transforms.ts --drain\` catches up and exits.
- \`npm run verify\` checks the run: every source record once in the output and the table.
- Edit \`src/transforms.ts\` for your own records and \`pipeline.yaml\` for your topics and tables.
`,
  };
}

/** Writes the scaffold into `dir` (created if missing); refuses a directory that is not empty. */
export function initProject(dir: string, onceflowDependency: string): { name: string; files: string[] } {
  const root = resolve(dir);
  if (existsSync(root) && readdirSync(root).length > 0) throw new ConfigError('init <dir>', `'${dir}' is not empty; give a new or empty directory`);
  const name = projectName(root);
  const files = scaffold(name, onceflowDependency);
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(join(root, file, '..'), { recursive: true });
    writeFileSync(join(root, file), text);
  }
  return { name, files: Object.keys(files) };
}
