/**
 * Fault injection for tests and the fault campaign: rules given to the worker (from
 * ONCEFLOW_FAULTS through src/config/) and, if set, from a faults file (ONCEFLOW_FAULTS_FILE;
 * same syntax; re-read whenever it changes, so a running worker takes new rules — the fault
 * campaign arms one rule at a time this way):
 *   point[@epoch=N][@partition=P][@attempt=A]:action, …
 * points:  prepare.start, prepare.kafka-sent, prepare.xa-prepared, commit.before,
 *          commit.between, redo.start, commit.mysql (start of the MySQL commit),
 *          commit.mysql-committed (after XA COMMIT, before the staged rows are applied)
 * actions: crash (SIGKILL of this process), throw (a retryable error), stall=MS (the activity
 *          waits, the process keeps heartbeating), freeze=MS (SIGSTOP of the whole process, as a
 *          GC pause or a suspended VM would; a detached helper sends SIGCONT after MS),
 *          split=markers|outputs (commit.before only: Kafka splits the epoch's transaction as a
 *          stale coordinator does — COMMIT markers written to the progress markers' partitions,
 *          or to the outputs' and dead letters', then the transaction aborted everywhere else;
 *          forceSplit in src/kafka/internals/markers.ts)
 * `new Faults()` arms nothing: a worker started without rules and file has no fault path.
 */
import { spawn } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { InjectedFault } from './errors';

export const FAULT_POINTS = [
  'prepare.start',
  'prepare.kafka-sent',
  'prepare.xa-prepared',
  'commit.before',
  'commit.between',
  'redo.start',
  'commit.mysql',
  'commit.mysql-committed',
] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];

interface Rule {
  point: string;
  epoch?: number;
  partition?: number;
  attempt?: number;
  action: 'crash' | 'throw' | 'stall' | 'freeze' | 'split';
  ms: number;
  /** split: which parts Kafka commits. */
  commits?: SplitCommits;
}

/** Which parts of a transaction a forced split commits (the rest it aborts). */
export type SplitCommits = 'markers' | 'outputs';

export function parseFaults(spec: string | undefined): Rule[] {
  if (!spec) return [];
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((item) => {
      const [where, action = 'crash'] = item.split(':');
      const [point, ...conds] = where!.split('@');
      // A point no code hits would arm nothing, silently: refused.
      if (!(FAULT_POINTS as readonly string[]).includes(point!))
        throw new Error(`ONCEFLOW_FAULTS: unknown point '${point}' in '${item}' (points: ${FAULT_POINTS.join(', ')})`);
      const rule: Rule = { point: point!, action: 'crash', ms: 0 };
      for (const c of conds) {
        const [k, v] = c.split('=');
        if (k === 'epoch' || k === 'partition' || k === 'attempt') rule[k] = Number(v);
        else throw new Error(`ONCEFLOW_FAULTS: unknown condition '${c}' in '${item}'`);
      }
      if (action === 'crash' || action === 'throw') rule.action = action;
      else if (action.startsWith('split=')) {
        const commits = action.slice('split='.length);
        if (commits !== 'markers' && commits !== 'outputs')
          throw new Error(`ONCEFLOW_FAULTS: '${action}' needs split=markers or split=outputs`);
        if (rule.point !== 'commit.before')
          throw new Error(`ONCEFLOW_FAULTS: split works at commit.before only, not at '${rule.point}'`);
        Object.assign(rule, { action: 'split', commits });
      } else if (action.startsWith('stall=') || action.startsWith('freeze=')) {
        rule.action = action.startsWith('stall=') ? 'stall' : 'freeze';
        rule.ms = Number(action.slice(action.indexOf('=') + 1));
        if (!Number.isInteger(rule.ms) || rule.ms <= 0)
          throw new Error(`ONCEFLOW_FAULTS: '${action}' needs a positive number of milliseconds`);
      } else throw new Error(`ONCEFLOW_FAULTS: unknown action '${action}' in '${item}'`);
      return rule;
    });
}

export class Faults {
  private fileRules: Rule[] = [];
  private fileStamp = '';

  constructor(
    private readonly rules: Rule[] = [],
    private readonly file?: string,
    /** Told each `[faults]` line as it is written (an in-process worker's test reads them here, not from its own stderr). */
    private readonly onLine?: (line: string) => void,
  ) {}

  /** One line per fault that fires, so a campaign watching stderr knows when and where it hit. */
  private say(line: string): void {
    process.stderr.write(`${line}\n`);
    this.onLine?.(line);
  }

  /** The faults a worker's settings arm (src/config/). */
  static fromSettings(f: { rules?: string; file?: string }): Faults {
    return new Faults(parseFaults(f.rules), f.file);
  }

  /** Rules of the faults file as of now (a missing or unreadable file means none). */
  private currentFileRules(): Rule[] {
    if (!this.file) return [];
    let stamp: string;
    try {
      const st = statSync(this.file);
      stamp = `${st.mtimeMs}:${st.size}`;
    } catch {
      this.fileStamp = '';
      return (this.fileRules = []);
    }
    if (stamp !== this.fileStamp) {
      this.fileStamp = stamp;
      try {
        this.fileRules = parseFaults(readFileSync(this.file, 'utf8').replace(/\n/g, ','));
      } catch (e) {
        this.say(`[faults] ignoring ${this.file}: ${e instanceof Error ? e.message : String(e)}`);
        this.fileRules = [];
      }
    }
    return this.fileRules;
  }

  /** `split`: how to split the transaction at hand (commit.before). */
  async hit(
    point: FaultPoint,
    at: { epoch: number; partition: number; attempt: number },
    split?: (commits: SplitCommits) => Promise<void>,
  ): Promise<void> {
    for (const r of [...this.rules, ...this.currentFileRules()]) {
      if (r.point !== point) continue;
      if (r.epoch !== undefined && r.epoch !== at.epoch) continue;
      if (r.partition !== undefined && r.partition !== at.partition) continue;
      if (r.attempt !== undefined && r.attempt !== at.attempt) continue;
      const where = `${point} epoch=${at.epoch} partition=${at.partition} attempt=${at.attempt} pid=${process.pid}`;
      if (r.action === 'crash') {
        this.say(`[faults] SIGKILL at ${where}`);
        process.kill(process.pid, 'SIGKILL');
        await new Promise(() => undefined);
      }
      if (r.action === 'throw') {
        this.say(`[faults] throw at ${where}`);
        throw new InjectedFault(point);
      }
      if (r.action === 'freeze') {
        this.say(`[faults] freeze=${r.ms} at ${where}`);
        // The whole process stops (timers, heartbeats, sockets); a detached shell thaws it.
        spawn('sh', ['-c', `sleep ${r.ms / 1000}; kill -CONT ${process.pid}`], {
          detached: true,
          stdio: 'ignore',
        }).unref();
        process.kill(process.pid, 'SIGSTOP');
        this.say(`[faults] thawed at ${where}`);
      }
      if (r.action === 'split' && split) {
        this.say(`[faults] split=${r.commits} at ${where}`);
        await split(r.commits!);
      }
      if (r.action === 'stall') {
        this.say(`[faults] stall=${r.ms} at ${where}`);
        await sleep(r.ms);
      }
    }
  }
}
