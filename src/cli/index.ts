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
import type { PartitionResult } from '../workflows/interface';
import { verifyPipeline } from '../verify';
import { createOnceflowWorker, transformsOf } from '../worker';
import { printReport } from './report';
import { initProject } from './init';
import { checkConnections, redactedSettings } from './config-check';
import { installCliLog, installWorkerLog, ProgressView } from './progress';
import { runPipeline } from './run';
import { loadPipelineConfig } from '../pipeline-file';
import { exportHistory, replay } from '../history';
import { controlPartitions, pipelinePartitionIds } from './partitions';
import { STALLED_AFTER_SEC, describeStall, listPipelines, pipelineProblem, pipelineStatus, type PartitionRow } from './status';
import { describeInDoubt, inDoubt, resolveInDoubt } from './transactions';
import { COMMANDS, GLOBAL_OPTIONS, OPTIONS, commandHelp, usage, type OptionName } from './commands';
import { onStopSignal } from '../signals';
import { createSourceTopics, produceFile } from './topics';
import { log, setLogSink } from '../log';

export { stopWithParent } from '../signals';

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

function need(arg: string | undefined, what: string, cmd: string): string {
  if (!arg) throw new UsageError(`missing ${what}\n\n${commandHelp(cmd)}`);
  return arg;
}

type Io = { stdout: (s: string) => void; stderr: (s: string) => void };

const version = () => (require('../../package.json') as { version: string }).version;

/** The command, its arguments and options, checked against its row of the argument table (./commands). */
function parseCommandLine(argv: string[]): { cmd?: string; args: string[]; o: Partial<Record<OptionName, string | boolean>> } {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
  const [cmd, ...args] = positionals;
  const o = values as Partial<Record<OptionName, string | boolean>>;
  if (!cmd || o.help || o.version) return { ...(cmd ? { cmd } : {}), args, o };
  const spec = COMMANDS[cmd];
  if (!spec) throw new UsageError(`unknown command '${cmd}'\n\n${usage()}`);
  const foreign = (Object.keys(o) as OptionName[]).filter((k) => !spec.options.includes(k) && !GLOBAL_OPTIONS.includes(k));
  if (foreign.length) throw new UsageError(`${foreign.map((f) => `--${f}`).join(', ')} does not apply to '${cmd}'\n\n${commandHelp(cmd)}`);
  if (args.length > spec.positionals[1]) throw new UsageError(`'${cmd}' takes ${spec.positionals[1] === 0 ? 'no arguments' : `at most ${spec.positionals[1]} argument(s)`}, got ${args.map((a) => `'${a}'`).join(' ')}\n\n${commandHelp(cmd)}`);
  return { cmd, args, o };
}

export async function main(argv: string[], io: Io = { stdout: (s) => process.stdout.write(s), stderr: (s) => process.stderr.write(s) }): Promise<number> {
  let parsed;
  try {
    parsed = parseCommandLine(argv);
  } catch (e) {
    io.stderr(`onceflow: ${errorMessage(e)}${e instanceof UsageError ? '' : `\n\n${usage()}`}\n`);
    return 2;
  }
  const { cmd, args, o } = parsed;
  if (o.version) {
    io.stdout(`onceflow ${version()}\n`);
    return 0;
  }
  if (!cmd) {
    io.stdout(`${usage()}\n`);
    return o.help ? 0 : 2;
  }
  if (o.help) {
    io.stdout(`${commandHelp(cmd)}\n`);
    return 0;
  }
  const json = Boolean(o.json);
  const out = (human: string, data: unknown) => io.stdout(json ? `${JSON.stringify(data, null, 2)}\n` : `${human}\n`);
  const logOptions = { ...(o['log-file'] ? { logFile: String(o['log-file']) } : {}), verbose: Boolean(o.verbose), echo: (l: string) => io.stderr(`${l}\n`) };
  installCliLog(logOptions);
  try {
    const configFile = cmd === 'topics' ? args[1] : args[0];
    const fromFile = cmd === 'start' || cmd === 'run' || cmd === 'topics' || (cmd === 'config' && configFile !== undefined);
    const base = fromFile ? loadPipelineConfig(need(configFile, 'config file', cmd)).settings : loadSettings();
    const settings = o.transforms ? { ...base, transformsModule: String(o.transforms) } : base;
    const ctx: Ctx = { settings, json, out };
    return await run(cmd, args, o, ctx, io, logOptions);
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
  } finally {
    setLogSink(undefined);
  }
}

/** A summary line of the pipeline every 5 s until SIGINT/SIGTERM or the pipeline ends. */
async function followPipeline(s: Connections, spec: PipelineSpec, write: (line: string) => void): Promise<void> {
  let stop = false;
  const off = onStopSignal(() => (stop = true));
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
    off();
  }
}

function initCommand(dir: string, dependency: string | undefined, out: Ctx['out']): number {
  const { name, files } = initProject(dir, dependency ?? `^${version()}`);
  out(`created pipeline project '${name}' in ${dir}: ${files.join(', ')}\nnext: cd ${dir} && npm install && npm test && npm run topics && npm run feed && npm start`, { name, dir, files });
  return 0;
}

async function run(cmd: string, args: string[], o: Partial<Record<OptionName, string | boolean>>, { settings, out }: Ctx, io: Io, logOptions: Parameters<typeof installWorkerLog>[0]): Promise<number> {
  const [arg] = args;
  /** A line for the terminal and the log file (worker and run). */
  const say = (line: string) => log('INFO', 'onceflow', line);
  switch (cmd) {
    case 'init':
      return initCommand(need(arg, 'directory', cmd), o.onceflow as string | undefined, out);
    case 'run': {
      const cfg = loadPipelineConfig(need(arg, 'config file', cmd));
      installWorkerLog(logOptions);
      const results = await runPipeline({ ...cfg, settings: { ...cfg.settings, ...(settings.transformsModule ? { transformsModule: settings.transformsModule } : {}) } }, { drain: Boolean(o.drain), print: say });
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
      const cfg = loadPipelineConfig(need(arg, 'config file', cmd));
      return withServices(cfg.settings, async (s) => {
        const h = await startPipeline(s.client, cfg.spec, cfg.taskQueue);
        const ui = workflowUrl(cfg.settings, h.workflowId);
        const worker = `onceflow worker --task-queue ${cfg.taskQueue} --transforms ${settings.transformsModule ?? '<module exporting transforms>'}`;
        out(`started pipeline ${cfg.spec.name}: workflow ${h.workflowId} on task queue ${cfg.taskQueue}\nWeb UI: ${ui}\nworkers: ${worker}`, {
          pipeline: cfg.spec.name,
          workflowId: h.workflowId,
          runId: h.firstExecutionRunId,
          taskQueue: cfg.taskQueue,
          ui,
          worker,
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
        const problem = await pipelineProblem(s.client, spec);
        const stalled = rows.filter((r) => r.stalled);
        const advice = stalled.length
          ? [
              '',
              ...stalled.map(describeStall),
              `what to do: read the last error. 'onceflow transactions ${spec.name}' lists in-doubt XA branches and Kafka transactions and their decision.`,
              `A frozen (zombie) worker is fenced automatically. If the error persists: stop the pipeline, 'onceflow transactions ${spec.name} --resolve', start it again`,
              `(docs/usage.md, "When a partition stalls", also says how to stop a partition whose commit keeps failing).`,
            ]
          : [];
        out(`pipeline ${spec.name} (source ${sourceTopics(spec).join(', ')} → ${spec.kafkaSink.topic} + ${spec.mysqlSink.tables.map((t) => t.name).join(', ')})\n${problem ? `${problem}\n` : ''}${table(rows)}${advice.map((l) => `\n${l}`).join('')}`, {
          pipeline: spec.name,
          problem,
          stalledAfterSec,
          partitions: rows,
        });
        return 0;
      });
    case 'pause':
    case 'resume':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline', cmd));
        const res = await controlPartitions(s.client, spec.name, await pipelinePartitionIds(s, spec), cmd);
        out(res.map((r) => `partition ${r.partition}: ${r.ok ? 'ok' : 'rejected'} — ${r.message}`).join('\n'), res);
        return res.every((r) => r.ok) ? 0 : 1;
      });
    case 'stop':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline', cmd));
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
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline', cmd));
        const report = await verifyPipeline({ ...s, transforms: transformsOf(settings) }, spec, o.json ? undefined : (done, total, p) => io.stderr(`  verified ${p} (${done}/${total})\n`));
        if (o.json) out('', report);
        else printReport(report, io.stdout);
        return report.ok ? 0 : 1;
      });
    case 'replay': {
      const target = need(arg, 'history file or workflow id', cmd);
      const isFile = target.endsWith('.json');
      const progress = o.json ? undefined : (done: number, total: number, run: string) => io.stderr(`  replayed ${run} (${done}/${total})\n`);
      const results = isFile ? await replay(null, target, settings.workflowBundle, progress) : await withServices(settings, (s) => replay(s.client, target, settings.workflowBundle, progress));
      out(results.map((r) => `${r.ok ? 'ok    ' : 'FAILED'} ${r.run}${r.error ? `\n       ${r.error}` : ''}`).join('\n'), results);
      return results.every((r) => r.ok) ? 0 : 1;
    }
    case 'export-history':
      return withServices(settings, async (s) => {
        const text = await exportHistory(s.client, need(arg, 'workflow id', cmd), o['run-id'] as string | undefined);
        if (o.out) {
          writeFileSync(String(o.out), text);
          io.stdout(`history of ${arg} written to ${o.out}\n`);
        } else io.stdout(`${text}\n`);
        return 0;
      });
    case 'transactions':
      return withServices(settings, async (s) => {
        const spec = await pipelineSpecOf(s.client, need(arg, 'pipeline', cmd));
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
      installWorkerLog(logOptions);
      const progress = new ProgressView(say);
      const w = await createOnceflowWorker({ settings, taskQueue, observe: progress.observe, ...(metricsPort !== undefined ? { metricsPort } : {}) });
      const off = onStopSignal((signal) => {
        say(`onceflow worker: ${signal}, stopping: the activities in flight finish first`);
        w.shutdown();
      });
      say(`onceflow worker on task queue '${taskQueue}'${w.metricsPort ? `, metrics at http://127.0.0.1:${w.metricsPort}/metrics` : ''}`);
      progress.start();
      try {
        await w.run();
      } finally {
        off();
        progress.stop();
      }
      say('onceflow worker stopped');
      return 0;
    }
    case 'topics': {
      if (arg !== 'create') throw new UsageError(`unknown 'topics' command '${arg ?? ''}'\n\n${commandHelp(cmd)}`);
      const cfg = loadPipelineConfig(need(args[1], 'config file', cmd));
      const partitions = o.partitions === undefined ? 1 : Number(o.partitions);
      if (!Number.isInteger(partitions) || partitions < 1) throw new UsageError(`--partitions must be a whole number ≥ 1, got '${o.partitions}'`);
      const res = await createSourceTopics(cfg.settings, cfg.spec, partitions);
      out(res.map((t) => `${t.created ? 'created' : 'exists '} ${t.topic} (${t.partitions} partition${t.partitions === 1 ? '' : 's'})`).join('\n'), res);
      return 0;
    }
    case 'produce': {
      const file = o.file === undefined ? undefined : String(o.file);
      const res = await produceFile(settings, need(arg, 'topic', cmd), need(file, '--file <events.jsonl>', cmd), o.key === undefined ? undefined : String(o.key));
      out(`produced ${res.records} record${res.records === 1 ? '' : 's'} from ${file} to ${res.topic}`, { ...res, file });
      return 0;
    }
    default:
      throw new UsageError(`unknown command '${cmd}'\n\n${usage()}`);
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
