/**
 * The sizes of the campaign: the full one (`npm run chaos`), the short one in `npm test`, and
 * the soak (`npm run soak`: an hour, faults minutes apart, state sampled). Same code.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { CampaignOptions } from './types';

export type Preset = 'full' | 'short' | 'soak' | 'soak-short' | 'cluster';

export function presetOptions(preset: Preset, seed: number, log: (s: string) => void): CampaignOptions {
  const home = process.env.ONCEFLOW_HOME || join(homedir(), '.cache', 'onceflow');
  const common = {
    seed,
    partitions: 4,
    workers: 2,
    transactionTimeoutMs: 10_000,
    maxRecords: 500,
    log,
    recoveryTimeoutMs: 240_000,
    recoveryBoundMs: 30_000,
  };
  if (preset === 'soak' || preset === 'soak-short') {
    const long = preset === 'soak';
    return {
      ...common,
      // ≥ 2,000,000 records over ≥ an hour: 650/s for the ~60 minutes the faults take.
      records: long ? 2_100_000 : 20_000,
      ratePerSecond: long ? 650 : 100,
      inputMultiplier: 1.3,
      mode: 'soak',
      soakFaults: long ? 20 : 3,
      soakSpacingMs: long ? [150_000, 210_000] : [20_000, 30_000],
      sampleEveryMs: long ? 60_000 : 15_000,
      randomEach: 0,
      txnTimeouts: 0,
      compareFailEveryNthEpoch: 40,
      compareFailAfter: 10,
      poisonEvery: long ? 99_991 : 4_999,
      portBase: 19000,
      runDir: join(home, long ? 'soak-run' : 'soak-test-run'),
      command: long ? `npm run soak -- --seed ${seed}` : `npm run soak -- --short --seed ${seed}`,
    };
  }
  if (preset === 'cluster') {
    // The 3-node KRaft cluster (issue 14): the three node-kill kinds at every protocol step and
    // at one random moment each (24 faults, 8 per kind), one stalled commit into the redo path.
    // Port base below the ephemeral range (32768+): a node's port there can be held by an
    // outgoing connection's local port, and services.sh then refuses to start it.
    return {
      ...common,
      kafkaNodes: 3,
      records: 20_000,
      ratePerSecond: 60,
      mode: 'cluster',
      randomEach: 1,
      txnTimeouts: 1,
      splits: 6,
      compareFailEveryNthEpoch: 40,
      compareFailAfter: 10,
      poisonEvery: 2999, // ≥ 5 poison records even when the 24 faults take only ~8 minutes (20,000 records)
      portBase: 23000,
      runDir: join(home, 'chaos-cluster-run'),
      command: `npm run chaos -- --cluster --seed ${seed}`,
    };
  }
  if (preset === 'full') {
    return {
      ...common,
      records: 100_000,
      ratePerSecond: 100,
      mode: 'every-step',
      randomEach: 2,
      txnTimeouts: 5,
      splits: 6,
      compareFailEveryNthEpoch: 40,
      compareFailAfter: 10,
      poisonEvery: 9973,
      portBase: 17000,
      runDir: join(home, 'chaos-run'),
      command: `npm run chaos -- --seed ${seed}`,
    };
  }
  return {
    ...common,
    records: 3000,
    ratePerSecond: 40,
    mode: 'cover',
    randomEach: 0,
    txnTimeouts: 1,
    compareFailEveryNthEpoch: 10,
    // The short stream gives epochs of about ten records: fail after two so the sink really throws.
    compareFailAfter: 2,
    poisonEvery: 499,
    portBase: 18000,
    runDir: join(home, 'chaos-test-run'),
    command: `npm run chaos -- --short --seed ${seed}`,
  };
}

/**
 * The same campaign on a grouped pipeline (`--parallelism N`: spec.parallelism = N, source
 * partition p in group p mod N): the option reaches the pipeline's spec, and the replay command
 * names it.
 */
export function withParallelism(o: CampaignOptions, parallelism: number | undefined): CampaignOptions {
  if (parallelism === undefined) return o;
  if (!Number.isInteger(parallelism) || parallelism < 1 || parallelism > o.partitions) {
    throw new Error(
      `--parallelism must be an integer from 1 to the campaign's ${o.partitions} partitions, got ${parallelism}`,
    );
  }
  return {
    ...o,
    parallelism,
    command: `${o.command.replace(/ --seed \d+$/, '')} --parallelism ${parallelism} --seed ${o.seed}`,
  };
}
