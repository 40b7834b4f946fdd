/**
 * The CLI's argument table: every command with its arguments, the options it takes and its help
 * text, and every option. src/cli/index.ts parses with it and dispatches; `onceflow --help` and
 * `onceflow <command> --help` are printed from it (a command without help here cannot exist).
 */
import { STALLED_AFTER_SEC } from './status';

export interface OptionSpec {
  type: 'boolean' | 'string';
  short?: string;
  /** the value's name in the usage text (string options) */
  value?: string;
  help: string;
}

export const OPTIONS = {
  json: { type: 'boolean', help: 'machine-readable output' },
  help: { type: 'boolean', short: 'h', help: 'this text' },
  version: { type: 'boolean', help: "onceflow's version" },
  verbose: { type: 'boolean', help: 'the full log (Temporal worker, Kafka client) on stderr' },
  'log-file': {
    type: 'string',
    value: 'f',
    help: 'append the full log (Temporal worker, Kafka client, progress) to f',
  },
  drain: { type: 'boolean', help: 'catch up with the source first, then end' },
  wait: { type: 'boolean', help: 'wait until every partition has ended' },
  resolve: { type: 'boolean', help: 'resolve what is in doubt (with the pipeline stopped)' },
  detach: { type: 'boolean', help: 'return at once instead of following the pipeline on a terminal' },
  out: { type: 'string', value: 'file', help: 'write to file instead of stdout' },
  'run-id': { type: 'string', value: 'id', help: 'a run other than the latest' },
  'task-queue': { type: 'string', value: 'q', help: 'the Temporal task queue (default: the settings)' },
  'metrics-port': { type: 'string', value: 'n', help: 'serve Prometheus metrics on port n (0: a free port)' },
  'stalled-after': {
    type: 'string',
    value: 's',
    help: `stalled = lag > 0 and no commit for s seconds (default ${STALLED_AFTER_SEC}), or attempt ≥ 5`,
  },
  transforms: {
    type: 'string',
    value: 'module',
    help: "a .js/.ts module exporting 'transforms' (a TransformRegistry or a name → transform map); also ONCEFLOW_TRANSFORMS",
  },
  onceflow: {
    type: 'string',
    value: 'spec',
    help: "the project's onceflow dependency (default: the tarball this onceflow was installed from, else ^<this version>), e.g. file:onceflow-0.1.0.tgz",
  },
  partitions: { type: 'string', value: 'n', help: 'partitions of each topic created (default: 1)' },
  file: { type: 'string', value: 'f', help: 'a JSON-lines file: one JSON value per line (blank lines are skipped)' },
  key: { type: 'string', value: 'field', help: "each record's key: this top-level field of the line's JSON object" },
} satisfies Record<string, OptionSpec>;

export type OptionName = keyof typeof OPTIONS;

/** Options every command takes. */
export const GLOBAL_OPTIONS: OptionName[] = ['json', 'help', 'verbose', 'log-file'];

export interface CommandSpec {
  /** positional arguments, as the usage shows them */
  args: string;
  /** how many positionals are required, and how many are allowed */
  positionals: [min: number, max: number];
  summary: string;
  /** more lines for `onceflow <command> --help` */
  details?: string;
  options: OptionName[];
}

export const COMMANDS: Record<string, CommandSpec> = {
  config: {
    args: '[config.yaml|json]',
    positionals: [0, 1],
    summary: 'the effective settings (secrets redacted) and a check of each connection',
    details: 'Checks the Temporal namespace, the Kafka brokers, the MySQL login and XA RECOVER; exit 1 if one fails.',
    options: [],
  },
  init: {
    args: '<dir>',
    positionals: [1, 1],
    summary: 'scaffold a project: a transform, its test, pipeline.yaml, a README',
    options: ['onceflow'],
  },
  run: {
    args: '<config.yaml|json>',
    positionals: [1, 1],
    summary: 'a worker in this process and the pipeline on its task queue, with a progress view',
    details:
      'Runs until SIGINT/SIGTERM (the pipeline keeps its state and goes on with the next worker); with --drain it\n' +
      'catches up with the source and exits. Prints a progress line every 5 s and one line per failed activity attempt.',
    options: ['transforms', 'drain'],
  },
  start: {
    args: '<config.yaml|json>',
    positionals: [1, 1],
    summary: 'start a pipeline (idempotent: a running one is returned)',
    details:
      'On a terminal it then follows the pipeline until Ctrl-C (--detach: return at once). Workers run it: onceflow worker.',
    options: ['detach', 'transforms'],
  },
  status: {
    args: '[pipeline]',
    positionals: [0, 1],
    summary: 'pipelines, or per partition: epoch, committed offset, lag, phase, last error',
    details: 'Per partition also the time since the last commit, the epochs in flight and a retried activity.',
    options: ['stalled-after'],
  },
  pause: { args: '<pipeline>', positionals: [1, 1], summary: 'pause at the next epoch boundary', options: [] },
  resume: { args: '<pipeline>', positionals: [1, 1], summary: 'resume a paused pipeline', options: [] },
  stop: {
    args: '<pipeline>',
    positionals: [1, 1],
    summary: 'stop at the next epoch boundary',
    options: ['drain', 'wait'],
  },
  verify: {
    args: '<pipeline>',
    positionals: [1, 1],
    summary: 'exactly-once verification (output, MySQL, XA, LSO, ledger vs markers)',
    details: "It needs the pipeline's transform (--transforms).",
    options: ['transforms'],
  },
  replay: {
    args: '<history.json | workflow id>',
    positionals: [1, 1],
    summary: 'replay histories with the current workflow code',
    details: 'It runs workflow code only: --transforms is accepted, as by verify, and not needed.',
    options: ['transforms'],
  },
  'export-history': {
    args: '<workflow id>',
    positionals: [1, 1],
    summary: "a workflow's history as JSON",
    options: ['out', 'run-id'],
  },
  transactions: {
    args: '<pipeline>',
    positionals: [1, 1],
    summary: 'list (and resolve) in-doubt XA branches and Kafka transactions',
    options: ['resolve'],
  },
  worker: {
    args: '',
    positionals: [0, 0],
    summary: 'run a worker until SIGINT/SIGTERM',
    details: 'Prints a progress line every 5 s and one line per failed activity attempt.',
    options: ['transforms', 'task-queue', 'metrics-port'],
  },
  topics: {
    args: 'create <config.yaml|json>',
    positionals: [2, 2],
    summary: "create the pipeline's source topics (idempotent)",
    details:
      'A topic that exists is left as it is. The pipeline creates its sink, dead-letter and progress topics itself.',
    options: ['partitions'],
  },
  produce: {
    args: '<topic>',
    positionals: [1, 1],
    summary: 'produce the lines of a JSON-lines file to a topic, one record per line',
    details:
      "Each record's value is its line. Every line is checked first: one bad line (its number and what is wrong\nare named) and nothing of the file is produced.",
    options: ['file', 'key'],
  },
};

const optionUsage = (n: OptionName) => {
  const o: OptionSpec = OPTIONS[n];
  return `--${n}${o.value ? ` <${o.value}>` : ''}`;
};

/** `onceflow <command> --help`. */
export function commandHelp(name: string): string {
  const c = COMMANDS[name]!;
  const opts = [...c.options, ...GLOBAL_OPTIONS];
  const width = Math.max(...opts.map((o) => optionUsage(o).length));
  return [
    `usage: onceflow ${name}${c.args ? ` ${c.args}` : ''}${c.options.map((o) => ` [${optionUsage(o)}]`).join('')}`,
    '',
    `${c.summary}.`,
    ...(c.details ? [c.details] : []),
    '',
    'options:',
    ...opts.map((o) => `  ${optionUsage(o).padEnd(width)}  ${OPTIONS[o].help}`),
  ].join('\n');
}

/** `onceflow --help`. */
export function usage(): string {
  const lines = Object.entries(COMMANDS).map(([n, c]) => [`${n}${c.args ? ` ${c.args}` : ''}`, c.summary] as const);
  const width = Math.max(...lines.map(([l]) => l.length));
  return [
    'usage: onceflow <command> [options]   (onceflow <command> --help: its arguments and options)',
    '',
    'commands:',
    ...lines.map(([l, s]) => `  ${l.padEnd(width)}  ${s}`),
    '',
    'Exit codes: 0 ok, 1 failed (or a check failed), 2 wrong usage or invalid config.',
    `options of every command: ${GLOBAL_OPTIONS.map(optionUsage).join(', ')}; onceflow --version`,
  ].join('\n');
}
