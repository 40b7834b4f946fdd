/**
 * The onceflow command (package bin). Human output by default, --json for scripts.
 * Exit codes: 0 ok, 1 failed (or a check failed), 2 wrong usage or invalid config.
 * This file parses the command line against the argument table (./commands) and dispatches to
 * each command's handler, which lives in the file of its concern.
 */
import { parseArgs } from 'node:util';
import { loadSettings } from '../config';
import { ConfigError, ValidationError, errorMessage } from '../errors';
import { setLogSink } from '../log';
import { loadPipelineConfig } from '../pipeline-file';
import { COMMANDS, GLOBAL_OPTIONS, OPTIONS, commandHelp, usage, type OptionName } from './commands';
import { configCommand } from './config-check';
import { UsageError, version, type CommandContext, type Io } from './context';
import { pauseResumeCommand, startCommand, stopCommand } from './control';
import { exportHistoryCommand, isHistoryFile, replayCommand } from './history';
import { initCommand } from './init';
import { installCliLog } from './progress';
import { verifyCommand } from './report';
import { runCommand } from './run';
import { statusCommand } from './status-command';
import { produceCommand, topicsCommand } from './topics';
import { transactionsCommand } from './transactions';
import { workerCommand } from './worker';

export { stopWithParent } from '../signals';
export { UsageError } from './context';

/** The command, its arguments and options, checked against its row of the argument table (./commands). */
function parseCommandLine(argv: string[]): {
  cmd?: string;
  args: string[];
  o: Partial<Record<OptionName, string | boolean>>;
} {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
  const [cmd, ...args] = positionals;
  const o = values as Partial<Record<OptionName, string | boolean>>;
  if (!cmd || o.help || o.version) return { ...(cmd ? { cmd } : {}), args, o };
  const spec = COMMANDS[cmd];
  if (!spec) throw new UsageError(`unknown command '${cmd}'\n\n${usage()}`);
  const foreign = (Object.keys(o) as OptionName[]).filter(
    (k) => !spec.options.includes(k) && !GLOBAL_OPTIONS.includes(k),
  );
  if (foreign.length)
    throw new UsageError(
      `${foreign.map((f) => `--${f}`).join(', ')} does not apply to '${cmd}'\n\n${commandHelp(cmd)}`,
    );
  if (args.length > spec.positionals[1])
    throw new UsageError(
      `'${cmd}' takes ${spec.positionals[1] === 0 ? 'no arguments' : `at most ${spec.positionals[1]} argument(s)`}, got ${args.map((a) => `'${a}'`).join(' ')}\n\n${commandHelp(cmd)}`,
    );
  return { cmd, args, o };
}

export async function main(
  argv: string[],
  io: Io = { stdout: (s) => process.stdout.write(s), stderr: (s) => process.stderr.write(s) },
): Promise<number> {
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
  const logOptions = {
    ...(o['log-file'] ? { logFile: String(o['log-file']) } : {}),
    verbose: Boolean(o.verbose),
    echo: (l: string) => io.stderr(`${l}\n`),
  };
  installCliLog(logOptions);
  const usageError = (message: string) => new UsageError(`${message}\n\n${commandHelp(cmd)}`);
  const need = (arg: string | undefined, what: string) => {
    if (!arg) throw usageError(`missing ${what}`);
    return arg;
  };
  try {
    const configFile = cmd === 'topics' ? args[1] : args[0];
    const fromFile =
      cmd === 'start' || cmd === 'run' || cmd === 'topics' || (cmd === 'config' && configFile !== undefined);
    // Commands that open no MySQL connection run without its password.
    const mysql = !(cmd === 'init' || cmd === 'produce' || (cmd === 'replay' && isHistoryFile(args[0] ?? '')));
    const base = fromFile
      ? loadPipelineConfig(need(configFile, 'config file')).settings
      : loadSettings(undefined, {}, { mysql });
    const settings = o.transforms ? { ...base, transformsModule: String(o.transforms) } : base;
    return await dispatch({ cmd, args, arg: args[0], o, settings, out, io, logOptions, need, usageError });
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

/** The handler of each command of the argument table (test/cli-tools.test.ts checks they name the same commands). */
function dispatch(c: CommandContext): Promise<number> | number {
  switch (c.cmd) {
    case 'init':
      return initCommand(c);
    case 'run':
      return runCommand(c);
    case 'config':
      return configCommand(c);
    case 'start':
      return startCommand(c);
    case 'status':
      return statusCommand(c);
    case 'pause':
    case 'resume':
      return pauseResumeCommand(c);
    case 'stop':
      return stopCommand(c);
    case 'verify':
      return verifyCommand(c);
    case 'replay':
      return replayCommand(c);
    case 'export-history':
      return exportHistoryCommand(c);
    case 'transactions':
      return transactionsCommand(c);
    case 'worker':
      return workerCommand(c);
    case 'topics':
      return topicsCommand(c);
    case 'produce':
      return produceCommand(c);
    default:
      throw new UsageError(`unknown command '${c.cmd}'\n\n${usage()}`);
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
