/**
 * onceflow's errors: each says whether retrying can help. Activities map them to
 * Temporal ApplicationFailures at their edge (`edge` in src/activities/context.ts), so the
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
  'NotAuthorized',
  'PipelineHalted',
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

/** The pipeline names a transform this worker (or `verify`) was not given. */
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
 * An epoch's records failed beyond the dead-letter budget, or a row names a table the pipeline
 * does not declare: a bug in the transform or the definition, not in the data. The epoch is not
 * committed and the partition stops; the message names the transform, the first failing
 * record's coordinates and error, and how to resume (src/activities/budget.ts).
 */
export class PipelineHalted extends OnceflowError {
  constructor(
    message: string,
    details: {
      pipeline: string;
      partition: number;
      epoch: number;
      cause: 'dead-letter-budget' | 'undeclared-table';
      record: string;
      error: string;
    },
  ) {
    super(message, { retryable: false, details });
  }
}

/**
 * An attempt wrote an epoch whose partition has already committed a later one: a zombie (an
 * attempt that outlived its timeout) or a workflow behind its ledger. Nothing it wrote may stay.
 */
export class StaleEpoch extends OnceflowError {
  constructor(pipeline: string, partition: number, epoch: number, later: number) {
    super(
      `pipeline ${pipeline} partition ${partition}: epoch ${epoch} is stale, epoch ${later} is already committed (an attempt that outlived its timeout)`,
      {
        retryable: false,
        details: { pipeline, partition, epoch, later },
      },
    );
  }
}

/** Kafka's answer for each missing permission, and what to grant (docs/deploy.md lists a pipeline's ACLs). */
const KAFKA_DENIALS: Record<string, string> = {
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
    "Write and Describe on the pipeline's transactional ids (TransactionalId, prefixed 'onceflow.<pipeline>.')",
  TOPIC_AUTHORIZATION_FAILED:
    'Read/Describe on the source topics, Write/Describe/Read (and Create, if onceflow creates them) on the output, dead-letter and progress topics, and Alter on the progress topic (onceflow adds its partitions)',
  GROUP_AUTHORIZATION_FAILED: "Read on the pipeline's consumer group ('onceflow.<pipeline>')",
  CLUSTER_AUTHORIZATION_FAILED: 'the cluster permission the request needs (IdempotentWrite on brokers that ask for it)',
};
const MYSQL_DENIALS = new Set([
  'ER_TABLEACCESS_DENIED_ERROR',
  'ER_DBACCESS_DENIED_ERROR',
  'ER_SPECIFIC_ACCESS_DENIED_ERROR',
  'ER_COLUMNACCESS_DENIED_ERROR',
]);

/** A service refused onceflow's principal a permission it needs; names what to grant. */
export class NotAuthorized extends OnceflowError {
  constructor(service: 'Kafka' | 'MySQL', refusal: string, grant: string, retryable: boolean) {
    super(`${service} refused: ${refusal} — grant ${grant}`, { retryable, details: { service, refusal } });
  }
}

/**
 * The NotAuthorized an error stands for, or undefined. `retryable`: whether the attempt may be
 * retried (true once an epoch is decided, so an operator's grant lets it finish).
 */
export function notAuthorized(e: unknown, retryable: boolean): NotAuthorized | undefined {
  for (let c: unknown = e; c instanceof Error; c = (c as { cause?: unknown }).cause) {
    const type = (c as { type?: unknown }).type;
    if (typeof type === 'string' && KAFKA_DENIALS[type])
      return new NotAuthorized('Kafka', `${type} (${c.message})`, KAFKA_DENIALS[type]!, retryable);
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string' && MYSQL_DENIALS.has(code))
      return new NotAuthorized('MySQL', c.message, 'the privilege named (docs/deploy.md lists the grants)', retryable);
  }
  return undefined;
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
