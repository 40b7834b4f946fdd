/** `onceflow replay` and `onceflow export-history`: workflow histories (src/history.ts). */
import { writeFileSync } from 'node:fs';
import { exportHistory, replay } from '../history';
import { withServices, type CommandContext } from './context';

/** `onceflow replay <target>`: a history file (replayed offline) rather than a workflow id. */
export const isHistoryFile = (target: string) => target.endsWith('.json');

/** `onceflow replay <history.json | workflow id>`: exit 1 if a run does not replay. */
export async function replayCommand({ arg, o, settings, out, io, need }: CommandContext): Promise<number> {
  const target = need(arg, 'history file or workflow id');
  const isFile = isHistoryFile(target);
  const progress = o.json
    ? undefined
    : (done: number, total: number, run: string) => io.stderr(`  replayed ${run} (${done}/${total})\n`);
  const results = isFile
    ? await replay(null, target, settings.workflowBundle, progress)
    : await withServices(settings, (s) => replay(s.client, target, settings.workflowBundle, progress));
  out(
    results.map((r) => `${r.ok ? 'ok    ' : 'FAILED'} ${r.run}${r.error ? `\n       ${r.error}` : ''}`).join('\n'),
    results,
  );
  return results.every((r) => r.ok) ? 0 : 1;
}

/** `onceflow export-history <workflow id> [--out file] [--run-id id]`. */
export function exportHistoryCommand({ arg, o, settings, io, need }: CommandContext): Promise<number> {
  return withServices(settings, async (s) => {
    const text = await exportHistory(s.client, need(arg, 'workflow id'), o['run-id'] as string | undefined);
    if (o.out) {
      writeFileSync(String(o.out), text);
      io.stdout(`history of ${arg} written to ${o.out}\n`);
    } else io.stdout(`${text}\n`);
    return 0;
  });
}
