/**
 * What every command's handler gets from the dispatch (src/cli/index.ts): its arguments and
 * options as the argument table (src/cli/commands.ts) checked them, the settings, and how to
 * print. Handlers live in the file of their concern; they do not import the argument table.
 */
import type { Settings } from '../config';
import { openConnections, type Connections } from '../connections';
import { log } from '../log';
import type { OptionName } from './commands';
import type { CliLogOptions } from './progress';

export class UsageError extends Error {}

export type Io = { stdout: (s: string) => void; stderr: (s: string) => void };

export interface CommandContext {
  cmd: string;
  /** The positional arguments; `arg` is the first. */
  args: string[];
  arg: string | undefined;
  o: Partial<Record<OptionName, string | boolean>>;
  settings: Settings;
  /** Prints `human`, or `data` as JSON with --json. */
  out: (human: string, data: unknown) => void;
  io: Io;
  logOptions: CliLogOptions;
  /** The argument, or a UsageError naming `what` and the command's help. */
  need: (arg: string | undefined, what: string) => string;
  /** A UsageError with `message` and the command's help. */
  usageError: (message: string) => UsageError;
}

export type CommandHandler = (c: CommandContext) => Promise<number> | number;

export async function withServices<T>(settings: Settings, fn: (s: Connections) => Promise<T>): Promise<T> {
  const c = await openConnections(settings, 'onceflow-cli');
  try {
    return await fn(c);
  } finally {
    await c.close();
  }
}

/** onceflow's own version (package.json). */
export const version = () => (require('../../package.json') as { version: string }).version;

/** A line for the terminal and the log file (worker and run). */
export const say = (line: string) => log('INFO', 'onceflow', line);
