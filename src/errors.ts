/**
 * onceflow's errors: each says whether retrying can help. Activities map them to
 * Temporal ApplicationFailures at their edge (`edge` in src/activities/edge.ts), so the
 * workflow's retry policy retries exactly the retryable ones.
 *
 * This module is pure (no Node built-ins) so workflow code may import the type names.
 */

export const NON_RETRYABLE_TYPES = [
  'ConfigError',
  'ValidationError',
  'ReconcileMismatch',
  'SourceGone',
  'SourceTopicGone',
  'MissingTransform',
] as const;

export class OnceflowError extends Error {
  readonly retryable: boolean;
  readonly details: Record<string, unknown>;
  constructor(message: string, opts: { retryable: boolean; details?: Record<string, unknown>; cause?: unknown }) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.retryable = opts.retryable;
    this.details = opts.details ?? {};
    this.name = new.target.name;
  }
}

/** A setting or definition field is wrong; names the field and how to fix it. */
export class ConfigError extends OnceflowError {
  readonly field: string;
  constructor(field: string, problem: string) {
    super(`${field} ${problem}`, { retryable: false, details: { field } });
    this.field = field;
  }
}

/** Several definition fields are wrong at once. */
export class ValidationError extends OnceflowError {
  readonly problems: { field: string; problem: string }[];
  constructor(what: string, problems: { field: string; problem: string }[]) {
    super(`${what} is invalid:\n${problems.map((p) => `  - ${p.field}: ${p.problem}`).join('\n')}`, {
      retryable: false,
      details: { problems },
    });
    this.problems = problems;
  }
}

/** Workflow state, the MySQL ledger and the Kafka progress marker disagree. */
export class ReconcileMismatch extends OnceflowError {
  constructor(message: string, evidence: Record<string, unknown>) {
    super(message, { retryable: false, details: evidence });
  }
}

/** Source records of an epoch are no longer in the log (retention), so a redo is impossible. */
export class SourceGone extends OnceflowError {
  constructor(message: string, details: Record<string, unknown>) {
    super(message, { retryable: false, details });
  }
}

/** A source topic of the pipeline no longer exists on the brokers (deleted): its partitions cannot go on. */
export class SourceTopicGone extends OnceflowError {
  constructor(topic: string, partition: number, pipeline: string) {
    super(
      `source topic '${topic}' of pipeline '${pipeline}' does not exist any more (partition ${partition} cannot be read); recreate the topic and start the pipeline again, or remove it from the pipeline definition`,
      { retryable: false, details: { topic, partition, pipeline } },
    );
  }
}

/** The pipeline names a transform this worker (or verify/replay) was not given. */
export class MissingTransform extends OnceflowError {
  constructor(transform: string, registered: string[], pipeline?: string) {
    super(
      `${pipeline ? `pipeline '${pipeline}' uses ` : ''}transform '${transform}', which is not registered here (registered: ${registered.join(', ') || 'none'}). ` +
        'Start the worker with --transforms <module> (or ONCEFLOW_TRANSFORMS), a module exporting `transforms` (a TransformRegistry or a name → transform map), ' +
        "or fix the pipeline's 'transform' field",
      { retryable: false, details: { transform, registered, ...(pipeline ? { pipeline } : {}) } },
    );
  }
}

/**
 * An attempt wrote an epoch whose partition has already committed a later one: a zombie (an
 * attempt that outlived its timeout) or a workflow behind its ledger. Nothing it wrote may stay.
 */
export class StaleEpoch extends OnceflowError {
  constructor(pipeline: string, partition: number, epoch: number, later: number) {
    super(`pipeline ${pipeline} partition ${partition}: epoch ${epoch} is stale, epoch ${later} is already committed (an attempt that outlived its timeout)`, {
      retryable: false,
      details: { pipeline, partition, epoch, later },
    });
  }
}

/** A transient condition (service restarting, lock wait, transaction still being decided). */
export class TransientError extends OnceflowError {
  constructor(message: string, details?: Record<string, unknown>, cause?: unknown) {
    super(message, { retryable: true, details, cause });
  }
}

/** A failure injected on purpose by tests and the fault campaign (see faults.ts). */
export class InjectedFault extends OnceflowError {
  constructor(point: string) {
    super(`injected fault at ${point}`, { retryable: true, details: { point } });
  }
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
