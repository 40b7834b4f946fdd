/**
 * What a run must have written: each source partition's committed records transformed once
 * (src/activities/apply.ts), gathered as expected output fingerprints per output partition,
 * expected dead letters and expected table rows. src/verify/checks.ts compares them with what
 * src/verify/read.ts finds.
 */
import { applyTransform, tableMap } from '../activities/apply';
import { ExpectedTables } from '../mysql/expected';
import type { PipelineSpec } from '../spec';
import type { Transform } from '../transforms/registry';
import { fingerprint } from './checks';
import type { SourceRead } from './read';
import type { PartitionReport, PipelineSourcePartition } from './types';

export class Expected {
  readonly rows = new ExpectedTables();
  /** Expected output fingerprints per output partition and source id, in source order. */
  readonly outputs = new Map<number, Map<number, string[]>>();
  /** Expected dead letters by source coordinates (their headers carry the run's epochs, which this expectation, mapped as epoch 0, does not know). */
  readonly deadLetters: string[] = [];
  private readonly tables: ReturnType<typeof tableMap>;

  constructor(
    private readonly spec: PipelineSpec,
    private readonly transform: Transform,
    /** Partition counts of output and dead-letter topic, when both exist (the default output partition is id mod the count). */
    private readonly layout: { outputPartitions: number; deadLetterPartitions: number } | undefined,
  ) {
    this.tables = tableMap(spec);
  }

  /** Adds one source partition's committed records, transformed once; returns its report row (outputs not counted yet). */
  async add(src: PipelineSourcePartition, read: SourceRead): Promise<PartitionReport> {
    const p = src.id;
    const applied = await applyTransform(
      this.spec,
      this.transform,
      read.records,
      { pipeline: this.spec.name, partition: p, epoch: 0, attempt: 0, options: this.spec.transformOptions ?? {} },
      this.tables,
      this.layout,
    );
    for (const op of applied.rows) this.rows.add(this.tables.get(op.table)!, p, op.values);
    for (const o of applied.outputs) {
      const byOut = this.outputs.get(o.partition) ?? this.outputs.set(o.partition, new Map()).get(o.partition)!;
      (byOut.get(p) ?? byOut.set(p, []).get(p)!).push(fingerprint(o.key, o.value));
    }
    const dls = applied.deadLetters.map((d) => String(d.headers?.['onceflow.source']));
    this.deadLetters.push(...dls);
    return {
      partition: p,
      topic: src.topic,
      topicPartition: src.partition,
      sourceEnd: read.sourceEnd,
      committedThrough: read.committedThrough,
      ledgerEpoch: read.ledgerEpoch,
      markerEpoch: read.markerEpoch,
      expectedOutputs: applied.outputs.length,
      outputs: 0,
      uncommittedOutputs: 0,
      duplicates: 0,
      missing: 0,
      unexpected: 0,
      inOrder: true,
      deadLetters: 0,
      expectedDeadLetters: dls.length,
    };
  }
}
