/**
 * The dead-letter budget (spec.deadLetter, docs/design.md §1.1): a transform that fails on many
 * records of an epoch is a bug, not bad data, and an epoch that holds such failures is never
 * committed. The prepare (./prepare.ts, a partition's epoch or a group's) calls `haltIfOverBudget`
 * after the transform and before it writes anything to Kafka or MySQL; `verify` judges a whole run
 * with `deadLettersAllowed`.
 */
import { PipelineHalted } from '../errors';
import { SPEC_DEFAULTS, type DeadLetterBudget, type PipelineSpec } from '../spec';
import type { Applied, RecordFailure } from './apply';
import type { ActivityContext } from './context';

/** The pipeline's budget; runs started before it existed get the default. */
export const budgetOf = (spec: PipelineSpec): DeadLetterBudget => spec.deadLetter ?? SPEC_DEFAULTS.deadLetter;

/**
 * Dead letters allowed among `records` records. An epoch: min(maxPerEpoch, max(1, ⌊maxRatio·n⌋))
 * — one bad record always passes, a transform failing on every record of an epoch of two or more
 * does not. A whole run (`verify`): max(1, ⌊maxRatio·n⌋), maxPerEpoch being a per-epoch cap.
 * maxPerEpoch 0 allows none in either. Pure.
 */
export function deadLettersAllowed(budget: DeadLetterBudget, records: number, scope: 'epoch' | 'run'): number {
  if (budget.maxPerEpoch === 0) return 0;
  const byRatio = Math.max(1, Math.floor(budget.maxRatio * records));
  return scope === 'epoch' ? Math.min(budget.maxPerEpoch, byRatio) : byRatio;
}

const coordinates = (f: RecordFailure) =>
  `topic '${f.record.topic}', partition ${f.record.partition}, offset ${f.record.offset}`;

/**
 * What the user does next, in every halt message: nothing of the epoch was committed and the
 * partition workflow has failed; a start of the pipeline — a running one too — starts it again
 * and it reconciles from the ledger (nothing lost or twice).
 */
export const RESUME_ADVICE =
  'Nothing of this epoch was committed. Once fixed, restart the workers and start the pipeline again (onceflow run <config>, or onceflow start <config>): the partition resumes from its last committed epoch.';

/** The transform's result for one source partition of an epoch (ungrouped: the only one; a group epoch: one per member). */
export interface EpochPart {
  partition: number;
  epoch: number;
  applied: Applied;
  records: number;
}

/**
 * Throws PipelineHalted (non-retryable: the partition stops) when a row names a table the
 * pipeline does not declare, or when the epoch's dead letters exceed the budget; the budget
 * counts the epoch as a whole (a group epoch: all its members). `what` names the epoch in the
 * message. Also reports the halt to the worker log and the metrics.
 */
export function haltIfOverBudget(
  ctx: Pick<ActivityContext, 'observe' | 'error'>,
  spec: PipelineSpec,
  what: string,
  parts: EpochPart[],
): void {
  const records = parts.reduce((a, p) => a + p.records, 0);
  const deadLetters = parts.reduce((a, p) => a + p.applied.deadLetters.length, 0);
  const budget = budgetOf(spec);
  const allowed = deadLettersAllowed(budget, records, 'epoch');
  const undeclaredIn = parts.find((p) => p.applied.undeclared);
  let halt:
    | { cause: 'dead-letter-budget' | 'undeclared-table'; part: EpochPart; first: RecordFailure; message: string }
    | undefined;
  if (undeclaredIn) {
    const u = undeclaredIn.applied.undeclared!;
    const declared = spec.mysqlSink.tables.map((t) => t.name).join(', ') || 'none';
    halt = {
      cause: 'undeclared-table',
      part: undeclaredIn,
      first: u,
      message: `pipeline '${spec.name}' halted at ${what}: transform '${spec.transform}' wrote a row for table '${u.table}', which the pipeline does not declare (declared: ${declared}); record ${coordinates(u)}. Declare the table in mysqlSink.tables or fix the transform. ${RESUME_ADVICE}`,
    };
  } else if (deadLetters > allowed) {
    const part = parts.find((p) => p.applied.firstFailure)!;
    const first = part.applied.firstFailure!;
    halt = {
      cause: 'dead-letter-budget',
      part,
      first,
      message:
        `pipeline '${spec.name}' halted at ${what}: transform '${spec.transform}' failed on ${deadLetters} of ${records} records, over the dead-letter budget of ${allowed} ` +
        `(deadLetter.maxRatio ${budget.maxRatio}, maxPerEpoch ${budget.maxPerEpoch}). First failing record: ${coordinates(first)} — ${first.reason}: ${first.error}. ` +
        `Fix the transform (or raise pipeline.deadLetter if such records are expected). ${RESUME_ADVICE}`,
    };
  }
  if (!halt) return;
  const { cause, part, first } = halt;
  const details = {
    pipeline: spec.name,
    partition: part.partition,
    epoch: part.epoch,
    cause,
    record: `${first.record.topic}/${first.record.partition}/${first.record.offset}`,
    error: first.error,
  };
  ctx.observe({ kind: 'halted', pipeline: spec.name, partition: part.partition, epoch: part.epoch, cause });
  ctx.error(halt.message, details);
  throw new PipelineHalted(halt.message, details);
}
