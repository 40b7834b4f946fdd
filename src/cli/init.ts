/**
 * `onceflow init <dir>`: scaffolds a project of one's own — a transform, its unit test, a
 * pipeline definition, sample input (events.jsonl) and a README with the project's commands
 * (`npm test`, `npm run topics`, `npm run feed`, `npm start`, `npm run verify`).
 *
 * onceflow is not published on npm yet: run from a local tarball (`npx --package=<tgz> onceflow
 * init`), the scaffold depends on that tarball, so its own `npm install` works without flags.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { ConfigError } from '../errors';
import { version, type CommandContext } from './context';

/**
 * The tarball this copy of onceflow was installed from, as `file:<absolute path>`, or undefined
 * when it was not installed from a local tarball that still exists (a checkout of the
 * repository, a registry install). npm records where a package came from in the installing
 * project's lockfile (`npx --package=<tgz>` installs into a project of its own under
 * ~/.npm/_npx), with the path relative to that project.
 */
export function installedFromTarball(packageRoot = resolve(__dirname, '..', '..')): string | undefined {
  if (basename(dirname(packageRoot)) !== 'node_modules') return undefined;
  const project = dirname(dirname(packageRoot));
  const key = relative(project, packageRoot).split(sep).join('/');
  for (const lock of [join(project, 'node_modules', '.package-lock.json'), join(project, 'package-lock.json')]) {
    let resolved: unknown;
    try {
      resolved = (JSON.parse(readFileSync(lock, 'utf8')) as { packages?: Record<string, { resolved?: unknown }> })
        .packages?.[key]?.resolved;
    } catch {
      continue; // no lockfile there, or not one npm wrote: look at the next
    }
    if (typeof resolved !== 'string' || !resolved.startsWith('file:') || !/\.(tgz|tar\.gz)$/.test(resolved))
      return undefined;
    const tarball = resolve(project, resolved.slice('file:'.length));
    return existsSync(tarball) ? `file:${tarball}` : undefined;
  }
  return undefined;
}

/**
 * The onceflow dependency the scaffold gets. `requested` is `--onceflow <spec>`, or the CLI's
 * default `^<this version>` — a range that resolves only once onceflow is published, so in
 * place of that default a copy installed from a local tarball names the tarball.
 */
export function onceflowDependency(
  requested: string,
  ownVersion: string,
  fromTarball = installedFromTarball(),
): string {
  return requested === `^${ownVersion}` && fromTarball ? fromTarball : requested;
}

/** A pipeline name from a directory name: lower case, [a-z0-9._-], at most 40 characters. */
export function projectName(dir: string): string {
  const n = basename(resolve(dir))
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[^a-z0-9]+/, '')
    .slice(0, 40);
  return n || 'my-pipeline';
}

/** Sample input for `npm run feed`: one JSON event a line, keyed by `user`. */
const EVENTS = [
  { user: 'ana', text: 'the quick brown fox' },
  { user: 'ben', text: 'jumps over the lazy dog' },
  { user: 'ana', text: 'The End' },
  { user: 'cleo', text: 'exactly once, every time' },
  { user: 'ben', text: 'once more' },
];

export function scaffold(name: string, onceflowDependency: string): Record<string, string> {
  const table = `${name.replace(/[^a-z0-9]+/g, '_')}_word_counts`.replace(/^_+/, '').slice(0, 64);
  const input = `${name}.input`;
  const pkg = {
    name,
    version: '0.1.0',
    private: true,
    scripts: {
      test: 'node --import tsx --test test/*.test.ts',
      topics: 'onceflow topics create pipeline.yaml',
      feed: `onceflow produce ${input} --file events.jsonl --key user`,
      // exec: no shell between npm and node, so npm's SIGTERM/SIGINT reach the worker (src/signals.ts).
      start: 'exec onceflow run pipeline.yaml --transforms src/transforms.ts',
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
 * It may be async (e.g. a lookup). A record it throws on goes to the dead-letter topic, within the
 * pipeline's dead-letter budget (deadLetter in pipeline.yaml); past it, the partition halts.
 */
import { defineTransform, TransformRegistry } from 'onceflow';

/** A JSON event { user, text } → the text in upper case (keyed by the user) + a count per word. */
export const words = defineTransform({
  map(record) {
    const event = JSON.parse(record.value?.toString('utf8') ?? 'null') as { user?: unknown; text?: unknown } | null;
    if (typeof event?.text !== 'string') throw new Error('not an event with a "text" string');
    const found = event.text.toLowerCase().match(/[a-z0-9']+/g) ?? [];
    return {
      kafka: [{ key: typeof event.user === 'string' ? event.user : null, value: event.text.toUpperCase() }],
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

test('an event becomes its text in upper case, keyed by the user, and one count per word', async () => {
  const out = await words.map(record('{"user":"ana","text":"Hello hello world"}'), ctx);
  assert.deepEqual(out.kafka, [{ key: 'ana', value: 'HELLO HELLO WORLD' }]);
  assert.deepEqual(out.mysql?.map((op) => op.values.word), ['hello', 'hello', 'world']);
});

test('a record that is not an event is rejected (and so dead-lettered by onceflow)', async () => {
  await assert.rejects(async () => words.map(record(null), ctx), /not an event/);
  await assert.rejects(async () => words.map(record('{"user":"ana"}'), ctx), /not an event/);
  await assert.rejects(async () => words.map(record('{not json'), ctx), SyntaxError);
});
`,
    'events.jsonl': EVENTS.map((e) => JSON.stringify(e)).join('\n') + '\n',
    'pipeline.yaml': `# The pipeline this project runs:  npm start   (onceflow run pipeline.yaml --transforms src/transforms.ts)
pipeline:
  name: ${name}
  source:
    topic: ${input}
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

An onceflow pipeline: JSON events \`{ "user", "text" }\` from
the Kafka topic \`${input}\` → the text in upper case in \`${name}.output\` and a count per word in
the MySQL table \`${table}\`, exactly once.

    npm test                 # the transform's unit tests (no services needed)
    npm run topics           # create the source topic: onceflow topics create pipeline.yaml
    npm run feed             # produce events.jsonl into ${input}, keyed by "user"
    npx onceflow run pipeline.yaml --transforms src/transforms.ts --drain   # catch up, then exit
    npm run verify           # every event once in the output and the table
    npm start                # a worker and the pipeline, running on; Ctrl-C stops the worker

These need a Temporal server, Kafka and MySQL/MariaDB. Point onceflow at them with
\`ONCEFLOW_TEMPORAL_ADDRESS\`, \`ONCEFLOW_KAFKA_BROKERS\`, \`ONCEFLOW_MYSQL_HOST\`, \`ONCEFLOW_MYSQL_USER\`,
\`ONCEFLOW_MYSQL_DATABASE\` and \`ONCEFLOW_MYSQL_PASSWORD\` in the environment. A \`connections\` section
in pipeline.yaml is read by \`onceflow topics\`, \`run\` and \`start\` only; \`produce\` (npm run feed),
\`verify\`, \`status\` and \`worker\` read the environment. The output topics and the table are created
by the pipeline.

- \`npx onceflow status ${name}\` shows each partition's epoch, lag and last error.
- Edit \`src/transforms.ts\` for your own records, \`pipeline.yaml\` for your topics and tables,
  and \`events.jsonl\` (one JSON value a line) for your sample input.
`,
  };
}

/** Writes the scaffold into `dir` (created if missing); refuses a directory that is not empty. */
export function initProject(dir: string, dependency: string): { name: string; files: string[] } {
  const root = resolve(dir);
  if (existsSync(root) && readdirSync(root).length > 0)
    throw new ConfigError('init <dir>', `'${dir}' is not empty; give a new or empty directory`);
  const name = projectName(root);
  const ownVersion = (
    JSON.parse(readFileSync(resolve(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }
  ).version;
  const files = scaffold(name, onceflowDependency(dependency, ownVersion));
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(join(root, file, '..'), { recursive: true });
    writeFileSync(join(root, file), text);
  }
  return { name, files: Object.keys(files) };
}

/** `onceflow init <dir>`. */
export function initCommand({ arg, o, out, need }: CommandContext): number {
  const dir = need(arg, 'directory');
  const { name, files } = initProject(dir, (o.onceflow as string | undefined) ?? `^${version()}`);
  out(
    `created pipeline project '${name}' in ${dir}: ${files.join(', ')}\nnext: cd ${dir} && npm install && npm test && npm run topics && npm run feed && npm start`,
    { name, dir, files },
  );
  return 0;
}
