/**
 * `onceflow transactions`: what is in doubt for a pipeline (prepared XA branches, open Kafka
 * transactions) and the decision each would get, and `--resolve` for a stopped pipeline — both
 * through the recovery path reconcile uses (src/recovery.ts), never a copy of it.
 */
import type { Client } from '@temporalio/client';
import type { Admin } from 'kafkajs';
import type { Pool } from 'mysql2/promise';
import { ISOLATION, latestOffset, type KafkaCluster } from '../kafka/internals';
import { partitionCounts } from '../kafka/topics';
import { detectDialect } from '../mysql/sink';
import { applyPipelineEpoch } from '../mysql/stage';
import {
  carryOut,
  describeSplit,
  examineGroupBranches,
  examinePartition,
  loggedSplits,
  namedXids,
  resolveGroupBranches,
  settleGoneGroupsKafka,
  settleGroupKafka,
  settleKafka,
  type GroupBranchDecision,
  type PartitionFindings,
} from '../recovery';
import type { LoggedSplit } from '../kafka/splits-in-log';
import { pipelineWorkflowId, runnerWorkflowId, type PipelineSpec } from '../spec';
import { pipelineSpecOf } from '../client';
import { withServices, type CommandContext } from './context';
import { pipelinePartitionIds, recordedIds } from './partitions';

export interface InDoubt {
  /** Prepared XA branches of partition groups (spec.parallelism) and what recovery would do with each. */
  groups: GroupBranchDecision[];
  /** Per partition: what the shared recovery path (src/recovery.ts) found and would do. */
  partitions: PartitionFindings[];
  /** Transactions Kafka split (src/kafka/splits-in-log.ts) among the partitions' last epochs. */
  splits: { partition: number; split: LoggedSplit }[];
  /** Partitions held back by an open transaction (LSO below the high watermark). */
  kafka: { topic: string; partition: number; lso: number; highWatermark: number }[];
}

/** Lists what is in doubt and the decision each would get; changes nothing. */
export async function inDoubt(
  deps: { cluster: KafkaCluster; pool: Pool; admin?: Admin },
  spec: PipelineSpec,
  partitions: number | number[],
): Promise<InDoubt> {
  const found: PartitionFindings[] = [];
  const splits: InDoubt['splits'] = [];
  const ids = await recordedIds(deps.pool, spec.name, partitions);
  const groups = await examineGroupBranches(
    deps.pool,
    spec,
    () => true,
    () => namedXids(deps.cluster, spec, ids),
    Date.now(),
  );
  for (const p of ids) {
    const f = await examinePartition(deps, spec, p, Date.now());
    if (f.refuse || f.epochs.some((e) => e.actions.length)) found.push(f);
    for (const split of await loggedSplits(deps.cluster, spec, p)) splits.push({ partition: p, split });
  }
  const kafka: InDoubt['kafka'] = [];
  // The sink and dead-letter topics may have fewer partitions than the source has ids.
  const counts = deps.admin
    ? await partitionCounts(deps.admin, [spec.kafkaSink.topic, spec.deadLetterTopic])
    : new Map<string, number>();
  for (const topic of [spec.kafkaSink.topic, spec.progressTopic, spec.deadLetterTopic]) {
    for (const p of ids) {
      if (p >= (counts.get(topic) ?? Infinity)) continue;
      const lso = await latestOffset(deps.cluster, topic, p, ISOLATION.READ_COMMITTED);
      const hw = await latestOffset(deps.cluster, topic, p, ISOLATION.READ_UNCOMMITTED);
      if (lso < hw) kafka.push({ topic, partition: p, lso, highWatermark: hw });
    }
  }
  return { groups, partitions: found, splits, kafka };
}

/** One line per action of `inDoubt`'s findings. */
export function describeInDoubt(found: InDoubt): string[] {
  const lines: string[] = [];
  for (const g of found.groups) {
    const verb = {
      commit: `would commit (partition ${g.by?.partition}'s committed progress marker names it)`,
      rollback: 'would roll back (no committed progress marker names it)',
      leave: 'left alone (opened after this look)',
    }[g.do];
    lines.push(`group ${g.group} epoch ${g.groupEpoch}: XA ${g.xid}: ${verb}`);
  }
  for (const f of found.partitions) {
    if (f.refuse) lines.push(`partition ${f.partition}: not decidable: ${f.refuse}`);
    for (const e of f.epochs) {
      for (const a of e.actions) {
        const what = a.do === 'commit-branch' || a.do === 'rollback-branch' || a.do === 'leave' ? `XA ${a.xid}: ` : '';
        const verb = {
          'commit-branch': 'would commit (the committed progress marker names it)',
          'rollback-branch': 'would roll back (not the decided branch)',
          'apply-staged': 'committed, staged rows not yet in the tables → would apply',
          'redo-kafka': 'MySQL committed, Kafka did not → starting the pipeline redoes the Kafka side',
          'redo-mysql': 'Kafka committed, MySQL did not → starting the pipeline redoes the MySQL side',
          leave: `left alone (${'why' in a ? a.why : ''})`,
          refuse: `not decidable (${'why' in a ? a.why : ''})`,
        }[a.do];
        lines.push(`partition ${f.partition} epoch ${e.epoch}: ${what}${verb}`);
      }
    }
  }
  for (const s of found.splits)
    lines.push(`${describeSplit(s.partition, s.split)} → starting the pipeline writes it again where it aborted`);
  for (const k of found.kafka)
    lines.push(
      `Kafka ${k.topic}[${k.partition}] held back by an open transaction: LSO ${k.lso} < high watermark ${k.highWatermark} → would abort it (fence the transactional ids)`,
    );
  return lines;
}

/** Whether a workflow exists and is running (describe; not found counts as not running). */
async function isRunning(client: Client, id: string): Promise<boolean> {
  try {
    return (await client.workflow.getHandle(id).describe()).status.name === 'RUNNING';
  } catch (e) {
    if ((e as { name?: string }).name === 'WorkflowNotFoundError') return false;
    throw e;
  }
}

/**
 * Resolves what is in doubt for a pipeline that is not running, through the same recovery path
 * as reconcile: fence the partitions' and groups' transactional ids (and any open one of a group
 * that no longer exists), commit the branch the committed marker
 * names, roll back the others, apply committed staged rows. A side that must be redone is left
 * for reconcile, which runs when the pipeline is started again.
 */
export async function resolveInDoubt(
  deps: { client: Client; cluster: KafkaCluster; pool: Pool },
  spec: PipelineSpec,
  partitions: number | number[],
): Promise<string[]> {
  const ids = await recordedIds(deps.pool, spec.name, partitions);
  const dialect = await detectDialect(deps.pool);
  for (const p of ids) {
    if (await isRunning(deps.client, runnerWorkflowId(spec, p))) {
      throw new Error(
        `pipeline ${spec.name} is running (partition ${p}); its workflows decide its transactions. Stop it first: onceflow stop ${spec.name}`,
      );
    }
  }
  if (await isRunning(deps.client, pipelineWorkflowId(spec.name)))
    throw new Error(`pipeline ${spec.name} is running; stop it first: onceflow stop ${spec.name}`);
  const done: string[] = [];
  const token = Date.now();
  // Transactions of groups that no longer exist first: they may hold back the partitions' LSOs.
  done.push(...(await settleGoneGroupsKafka(deps.cluster, spec)));
  const fenced = [];
  for (let g = 0; g < (spec.parallelism ?? 0); g++) fenced.push(...(await settleGroupKafka(deps.cluster, spec, g)));
  for (const p of ids) fenced.push(...(await settleKafka(deps.cluster, spec, p)));
  for (const id of fenced) done.push(`Kafka ${id}: fenced; any open transaction of it was aborted`);
  // Branches of partition groups first: they may hold ledger rows the partitions' recovery reads.
  done.push(
    ...(await resolveGroupBranches(
      deps.pool,
      spec,
      await examineGroupBranches(
        deps.pool,
        spec,
        () => true,
        () => namedXids(deps.cluster, spec, ids),
        token,
      ),
    )),
  );
  for (const p of ids) {
    const f = await examinePartition(deps, spec, p, token);
    if (f.refuse) {
      done.push(`partition ${p}: not decidable: ${f.refuse}`);
      continue;
    }
    done.push(
      ...(await carryOut(deps, spec, f, {
        apply: (epoch) => applyPipelineEpoch(deps.pool, spec, p, epoch, dialect),
      })),
    );
  }
  return done;
}

/** `onceflow transactions <pipeline> [--resolve]`. */
export function transactionsCommand({ arg, o, settings, out, need }: CommandContext): Promise<number> {
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
    out(
      lines.length
        ? `${lines.join('\n')}\n(resolve with: onceflow transactions ${spec.name} --resolve, once the pipeline is stopped)`
        : 'nothing in doubt',
      found,
    );
    return 0;
  });
}
