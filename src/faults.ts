/**
 * Fault injection for tests and the fault campaign, read from ONCEFLOW_FAULTS:
 *   point[@epoch=N][@partition=P][@attempt=A]:action, …
 * points:  prepare.start, prepare.kafka-sent, prepare.xa-prepared, commit.before,
 *          commit.between, redo.start
 * actions: crash (SIGKILL of this process), throw (a retryable error), stall=MS
 * Off unless the variable is set; production workers never set it.
 */
import { InjectedFault } from './errors';

export type FaultPoint = 'prepare.start' | 'prepare.kafka-sent' | 'prepare.xa-prepared' | 'commit.before' | 'commit.between' | 'redo.start';

interface Rule {
  point: string;
  epoch?: number;
  partition?: number;
  attempt?: number;
  action: 'crash' | 'throw' | 'stall';
  ms: number;
}

export function parseFaults(spec: string | undefined): Rule[] {
  if (!spec) return [];
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((item) => {
      const [where, action = 'crash'] = item.split(':');
      const [point, ...conds] = where!.split('@');
      const rule: Rule = { point: point!, action: 'crash', ms: 0 };
      for (const c of conds) {
        const [k, v] = c.split('=');
        if (k === 'epoch' || k === 'partition' || k === 'attempt') rule[k] = Number(v);
        else throw new Error(`ONCEFLOW_FAULTS: unknown condition '${c}' in '${item}'`);
      }
      if (action === 'crash' || action === 'throw') rule.action = action;
      else if (action.startsWith('stall=')) {
        rule.action = 'stall';
        rule.ms = Number(action.slice(6));
      } else throw new Error(`ONCEFLOW_FAULTS: unknown action '${action}' in '${item}'`);
      return rule;
    });
}

export class Faults {
  constructor(private readonly rules: Rule[] = parseFaults(process.env.ONCEFLOW_FAULTS)) {}

  async hit(point: FaultPoint, at: { epoch: number; partition: number; attempt: number }): Promise<void> {
    for (const r of this.rules) {
      if (r.point !== point) continue;
      if (r.epoch !== undefined && r.epoch !== at.epoch) continue;
      if (r.partition !== undefined && r.partition !== at.partition) continue;
      if (r.attempt !== undefined && r.attempt !== at.attempt) continue;
      if (r.action === 'crash') {
        process.stderr.write(`[faults] SIGKILL at ${point} epoch=${at.epoch} partition=${at.partition}\n`);
        process.kill(process.pid, 'SIGKILL');
        await new Promise(() => undefined);
      }
      if (r.action === 'throw') throw new InjectedFault(point);
      if (r.action === 'stall') await new Promise((res) => setTimeout(res, r.ms));
    }
  }
}
