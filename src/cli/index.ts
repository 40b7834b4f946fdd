/**
 * The onceflow command (package bin). Human output by default, --json for scripts.
 * Exit codes: 0 ok, 1 failed (or a check failed), 2 wrong usage or invalid config.
 */
import { parseArgs } from 'node:util';
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { pipelineSpecOf, startPipeline, controlPipeline, workflowUrl } from '../client';
import { pipelineWorkflowId, sourceTopics, type PipelineSpec } from '../spec';
import { openConnections, type Connections } from '../connections';
import { loadSettings, type Settings } from '../config';
import { ConfigError, ValidationError, errorMessage } from '../errors';
import type { PartitionResult } from '../workflows/partition';
import { verifyPipeline } from '../verify';
import { createOnceflowWorker, transformsOf } from '../worker';
import { printReport } from './report';
import { initProject } from './init';
import { checkConnections, redactedSettings } from './config-check';
import { installWorkerLog, ProgressView } from './progress';
import { runPipeline } from './run';
import { loadPipelineConfig } from './config-file';
import { exportHistory, replay } from './history';
import { controlPartitions, pipelinePartitionIds } from './partitions';
import { STALLED_AFTER_SEC, describeStall, listPipelines, pipelineStatus, type PartitionRow } from './status';
import { describeInDoubt, inDoubt, resolveInDoubt } from './transactions';

const USAGE = `usage: onceflow <command> [options]

commands:
  config [config.yaml|json]         the effective settings (secrets redacted) and a check of each
                                    connection: Temporal namespace, Kafka brokers, MySQL login and XA RECOVER
  init <dir> [--onceflow spec]      scaffold a project: a transform, its test, pipeline.yaml, a README
  run <config.yaml|json> [--transforms m] [--drain]  a worker in this process and the pipeline on its
                                    task queue, with a progress view; --drain: catch up, then exit
  start <config.yaml|json> [--detach]  start a pipeline (idempotent: a running one is returned); on a
                                    terminal it then follows the pipeline until Ctrl-C (--detach: return)
  status [pipeline] [--stalled-after s]  pipelines, or per partition: epoch, committed offset, lag, phase,
                                    time since the last commit, epochs in flight, retried activity, last error;
                                    stalled = lag > 0 and no commit for s seconds (default ${STALLED_AFTER_SEC}), or attempt ≥ 5
  pause <pipeline>                  pause at the next epoch boundary
  resume <pipeline>                 resume a paused pipeline
  stop <pipeline> [--drain] [--wait]  stop at the next epoch boundary; --drain: first catch up with the source
  verify <pipeline> [--transforms m] exactly-once verification (output, MySQL, XA, LSO, ledger vs markers)
  replay <history.json | workflow id>  replay histories with the current workflow code
  export-history <workflow id> [--out file] [--run-id id]
  transactions <pipeline> [--resolve]  list (and resolve) in-doubt XA branches and Kafka transactions
  worker [--transforms m] [--task-queue q] [--metrics-port n]  run a worker

worker and run print a progress line every 5 s and one line per failed activity attempt; the full
worker log goes to --log-file f (default: none), or to stderr with --verbose.

--transforms <module>: a .js/.ts module exporting 'transforms' (a TransformRegistry or a
name → transform map); also ONCEFLOW_TRANSFORMS. The worker and verify need the pipeline's transform.

options: --json (machine-readable output), --help`;

export class UsageError extends Error {}

interface Ctx {
  settings: Settings;
  json: boolean;
  out: (human: string, data: unknown) => void;
}

async function withServices<T>(settings: Settings, fn: (s: Connections) => Promise<T>): Promise<T> {
  const c = await openConnections(settings, 'onceflow-cli');
  try {
    return await fn(c);
  } finally {
    await c.close();
  }
}

function table(rows: PartitionRow[]): string {
  const head = ['partition', 'phase', 'epoch', 'committed', 'source-end', 'lag', 'since-commit', 'in-flight', 'retrying', 'stalled', 'last error'];
  const body = rows.map((r) =>
    [
      r.label,
      r.phase,
      r.epoch ?? '-',
      r.committedOffset ?? '-',
      r.sourceEnd,
      r.lag ?? '-',
      r.sinceCommitSec === null ? '-' : `${r.sinceCommitSec}s`,
      r.inFlight || '-',
      r.activity ? `${r.activity} attempt ${r.attempt}` : '-',
      r.stalled ? 'STALLED' : 'no',
      r.lastError ?? '',
    ].map(String),
  );
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  return [head, ...body].map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

function need(arg: string | undefined, what: string): string {
  if (!arg) throw new UsageError(`missing ${what}\n\n${USAGE}`);
  return arg;
}

export async function main(argv: string[], io: { stdout: (s: string) => void; stderr: (s: string) => void } = { stdout: (s) => process.stdout.write(s), stderr: (s) => process.stderr.write(s) }): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
        drain: { type: 'boolean', default: false },
        wait: { type: 'boolean', default: false },
        resolve: { type: 'boolean', default: false },
        out: { type: 'string' },
        'run-id': { type: 'string' },
        'task-queue': { type: 'string' },
        'metrics-port': { type: 'string' },
        'stalled-after': { type: 'string' },
        transforms: { type: 'string' },
        onceflow: { type: 'string' },
        verbose: { type: 'boolean', default: false },
        detach: { type: 'boolean', default: false },
        'log-file': { type: 'string' },
      },
    });
  } catch (e) {
    io.stderr(`onceflow: ${errorMessage(e)}\n\n${USAGE}\n`);
    return 2;
  }
  const { values: o, positionals } = parsed;
  const [cmd, arg] = positionals;
  if (o.help || !cmd) {
    io.stdout(`${USAGE}\n`);
    return cmd || o.help ? 0 : 2;
  }
  const json = Boolean(o.json);
  const out = (human: string, data: unknown) => io.stdout(json ? `${JSON.stringify(data, null, 2)}\n` : `${human}\n`);
  try {
    if (cmd === 'init') return initCommand(need(arg, 'directory'), o.onceflow as string | undefined, out);
    const fromFile = cmd === 'start' || cmd === 'run' || (cmd === 'config' && arg !== undefined);
    const base = fromFile ? loadPipelineConfig(need(arg, 'config file')).settings : loadSettings();
    const settings = o.transforms ? { ...base, transformsModule: String(o.transforms) } : base;
    const ctx: Ctx = { settings, json, out };
    return await run(cmd, arg, o, ctx, io);
  } catch (e) {
    if (e instanceof UsageError) {
      io.stderr(`onceflow: ${e.message}\n`);
      return 2;
    }
    if (e instanceof ValidationError || e instanceof ConfigError) {
      io.stderr(`onceflow: ${e.message}\n`);
      return 2;
    }
    io.stderr(`onceflow ${cmd}: ${errorMessage(e)}\n`);
    return 1;
  }
}

/** A summary line of the pipeline every 5 s until SIGINT/SIGTERM or the pipeline ends. */
async function followPipeline(s: Connections, spec: PipelineSpec, write: (line: string) => void): Promise<void> {
  let stop = false;
  const onSignal = () => (stop = true);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, onSignal);
  const closed = s.client.workflow
    .getHandle(pipelineWorkflowId(spec.name))
    .result()
    .then(
      () => 'ended',
      (e: unknown) => `failed: ${errorMessage(e)}`,
    );
  let ended: string | undefined;
  void closed.then((r) => (ended = r));
  write(`following ${spec.name} (Ctrl-C stops following; the pipeline runs on)\n`);
  try {
    while (!stop && !ended) {
      const rows = await pipelineStatus(s, spec, 0);
      const sum = (f: (r: PartitionRow) => number | null) => rows.reduce((a, r) => a + (f(r) ?? 0), 0);
      const stalled = rows.filter((r) => r.stalled).map((r) => r.label);
      write(
        `${new Date().toISOString().slice(11, 19)}  partitions ${rows.length}  committed ${sum((r) => r.committedOffset)}  lag ${sum((r) => r.lag)}` +
          `  retrying ${rows.filter((r) => r.activity).length}${stalled.length ? `  STALLED ${stalled.join(', ')} (onceflow status ${spec.name})` : ''}\n`,
      );
      for (let i = 0; i < 50 && !stop && !ended; i++) await sleep(100);
    }
    if (ended) write(`pipeline ${spec.name} ${ended}\n`);
  } finally {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.off(sig, onSignal);
  }
}

function initCommand(dir: string, dependency: string | undefined, out: Ctx['out']): number {
  const version = (require('../../package.json') as { version: string }).version;
  const { name, files } = initProject(dir, dependency ?? `^${version}`);
  out(`created pipeline project '${name}' in ${dir}: ${files.join(', ')}\nnext: cd ${dir} && npm install && npm test && npm start`, { name, dir, files });
  return 0;
}

async function run(
  cmd: string,
  arg: string | undefined,
  o: Record<string, string | boolean | undefined>,
  { settings, out }: Ctx,
  io: { stdout: (s: string) => void; stderr: (s: string) => void },
): Promise<number> {
  switch (cmd) {
    case 'run': {
      const cfg = loadPipelineConfig(need(arg, 'config file'));
      installWorkerLog({ ...(o['log-file'] ? { logFile: String(o['log-file']) } : {}), verbose: Boolean(o.verbose), echo: (l) => io.stderr(`${l}\n`) });
      const results = await runPipeline({ ...cfg, settings: { ...cfg.settings, ...(settings.transformsModule ? { transformsModule: settings.transformsModule } : {}) } }, { drain: Boolean(o.drain), print: (l) => io.stderr(`${l}\n`) });
      if (results) out(results.map((r) => `partition ${r.partition}: ${r.reason}, offset ${r.state.offset}`).join('\n'), results);
      return 0;
    }
    case 'config': {
      const checks = await checkConnections(settings);
      out(
        [
          'effective settings (secrets redacted):',
          JSON.stringify(redactedSettings(settings), null, 2),
          ...checks.map((c) => `${c.ok ? 'ok    ' : 'FAILED'} ${c.service}: ${c.detail}`),
        ].join('\n'),
        { settings: redactedSettings(settings), checks },
      );
      return checks.every((c) => c.ok) ? 0 : 1;
    }
    case 'start': {
      const cfg = loadPipelineConfig(need(arg, 'config file'));
      return withServices(cfg.settings, async (s) => {
        const h = await startPipeline(s.client, cfg.spec, cfg.taskQueue);
        const ui = workflowUrl(cfg.settings, h.workflowId);
        out(`started pipeline ${cfg.spec.name}: workflow ${h.workflowId} on task queue ${cfg.taskQueue}\nWeb UI: ${ui}\nworkers: onceflow worker --task-queue ${cfg.taskQueue}`, {
          pipeline: cfg.spec.name,
          workflowId: h.workflowId,
          runId: h.firstExecutionRunId,
          taskQueue: cfg.taskQueue,
          ui,
        });
        // On a terminal: follow the pipeline until Ctrl-C (it runs on without this command).
        if (!o.json && !o.detach && process.stdout.isTTY) await followPipeline(s, cfg.spec, io.stderr);
        return 0;
      });
    }
    case 'status':
      return withServices(settings, async (s) => {
        if (!arg) {
          const list = await listPipelines(s.client);
          out(list.length ? list.map((p) => `${p.pipeline.padEnd(32)} ${p.status.padEnd(12)} started ${p.started}`).join('\n') : 'no pipelines', list);
          return 0;
        }
        const stalledAfterSec = o['stalled-after'] === undefined ? STALLED_AFTER_SEC : Number(o['stalled-after']);
        if (!Number.isFinite(stalledAfterSec) || stalledAfterSec < 0) throw new UsageError(`--stalled-after must be a number of seconds ≥ 0, got '${o['stalled-after']}'`);
        const spec = await pipelineSpecOf(s.client, arg);
        const rows = await pipelineStatus(s, spec, (await pipelinePartitionIds(s, spec)).length, { stalledAfterSec });
        const stalled = rows.filter((r) => r.stalled);
        const advice = stalled.length
          ? [
              '',
              ...stalled.map(describeStall),
              `what to do: read the last error. 'onceflow transactions ${spec.name}' lists in-doubt XA branches and Kafka transactions and their decision.`,
              `A frozen (zombie) worker is fenced automatically. If the error persists: stop the pipeline, 'onceflow transactions ${spec.name} --resolve', start it again`,
              `(README.md, "Operating pipelines" → "When a partition stalls", also says how to stop a partition whose commit keeps failing).`,
            ]
          : [];
        out(`pipeline ${spec.name} (source ${sourceTopics(spec).join(', ')} → ${spec.kafkaSink.topic} + ${spec.mysqlSink.tables.map((t) => t.name).join(', ')})\n${table(rows)}${advice.map((l) => `\n${l}`).join('')}`, {
          pipeline: spec.name,
          stalledAfterSec,
          partitions: rows,
        });
        return 0;
      });
    case 'pause':
    case 'resume':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
        const res = await controlPartitions(s.client, spec.name, await pipelinePartitionIds(s, spec), cmd);
        out(res.map((r) => `partition ${r.partition}: ${r.ok ? 'ok' : 'rejected'} — ${r.message}`).join('\n'), res);
        return res.every((r) => r.ok) ? 0 : 1;
      });
    case 'stop':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
        const partitions = await pipelinePartitionIds(s, spec);
        const action = o.drain ? 'drain' : 'stop';
        const res = await controlPartitions(s.client, spec.name, partitions, action);
        if (res.some((r) => !r.ok)) await controlPipeline(s.client, spec.name, action); // children not started yet: via the parent
        if (!o.wait) {
          out(res.map((r) => `partition ${r.partition}: ${r.ok ? `${action} accepted` : r.message}`).join('\n'), res);
          return 0;
        }
        const handle = s.client.workflow.getHandle(pipelineWorkflowId(spec.name));
        const done = handle.result() as Promise<PartitionResult[]>;
        let finished = false;
        void done.finally(() => (finished = true)).catch(() => undefined);
        while (!finished) {
          await Promise.race([done.catch(() => undefined), sleep(1000)]);
          if (finished || o.json) continue;
          const rows = await pipelineStatus(s, spec, partitions.length);
          io.stderr(`  ${action}: ${rows.map((r) => `${r.label} lag ${r.lag ?? '?'}`).join(', ')}\n`);
        }
        const results = await done;
        out(results.map((r) => `partition ${r.partition}: ${r.reason} after ${r.state.committedEpochs} epochs in the last run, offset ${r.state.offset}`).join('\n'), results);
        return 0;
      });
    case 'verify':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
        const report = await verifyPipeline({ ...s, transforms: transformsOf(settings) }, spec, o.json ? undefined : (done, total, p) => io.stderr(`  verified ${p} (${done}/${total})\n`));
        if (o.json) out('', report);
        else printReport(report, io.stdout);
        return report.ok ? 0 : 1;
      });
    case 'replay': {
      const target = need(arg, 'history file or workflow id');
      const isFile = target.endsWith('.json');
      const progress = o.json ? undefined : (done: number, total: number, run: string) => io.stderr(`  replayed ${run} (${done}/${total})\n`);
      const results = isFile ? await replay(null, target, settings.workflowBundle, progress) : await withServices(settings, (s) => replay(s.client, target, settings.workflowBundle, progress));
      out(results.map((r) => `${r.ok ? 'ok    ' : 'FAILED'} ${r.run}${r.error ? `\n       ${r.error}` : ''}`).join('\n'), results);
      return results.every((r) => r.ok) ? 0 : 1;
    }
    case 'export-history':
      return withServices(settings, async (s) => {
        const text = await exportHistory(s.client, need(arg, 'workflow id'), o['run-id'] as string | undefined);
        if (o.out) {
          writeFileSync(String(o.out), text);
          io.stdout(`history of ${arg} written to ${o.out}\n`);
        } else io.stdout(`${text}\n`);
        return 0;
      });
    case 'transactions':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline'));
        const partitions = await pipelinePartitionIds(s, spec);
        if (o.resolve) {
          const done = await resolveInDoubt(s, spec, partitions);
          out(done.length ? done.join('\n') : 'nothing in doubt', done);
          return 0;
        }
        const found = await inDoubt(s, spec, partitions);
        const lines = describeInDoubt(found);
        out(lines.length ? `${lines.join('\n')}\n(resolve with: onceflow transactions ${spec.name} --resolve, once the pipeline is stopped)` : 'nothing in doubt', found);
        return 0;
      });
    case 'worker': {
      const metricsPort = o['metrics-port'] === undefined ? undefined : Number(o['metrics-port']);
      if (metricsPort !== undefined && (!Number.isInteger(metricsPort) || metricsPort < 0 || metricsPort > 65535)) throw new UsageError(`--metrics-port must be a port number, got '${o['metrics-port']}'`);
      const taskQueue = (o['task-queue'] as string | undefined) ?? settings.temporal.taskQueue;
      installWorkerLog({ ...(o['log-file'] ? { logFile: String(o['log-file']) } : {}), verbose: Boolean(o.verbose), echo: (l) => io.stderr(`${l}\n`) });
      const progress = new ProgressView((l) => io.stderr(`${l}\n`));
      const w = await createOnceflowWorker({ settings, taskQueue, observe: progress.observe, ...(metricsPort !== undefined ? { metricsPort } : {}) });
      for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => w.shutdown());
      io.stderr(`onceflow worker on task queue '${taskQueue}'${w.metricsPort ? `, metrics at http://127.0.0.1:${w.metricsPort}/metrics` : ''}\n`);
      progress.start();
      try {
        await w.run();
      } finally {
        progress.stop();
      }
      return 0;
    }
    default:
      throw new UsageError(`unknown command '${cmd}'\n\n${USAGE}`);
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      process.stderr.write(`onceflow: ${errorMessage(e)}\n`);
      process.exit(1);
    },
  );
}
