/**
 * A deliberately nondeterministic change of partitionWorkflow, for the negative replay test:
 * it sleeps before reconciling, so its first command (a timer) does not match the recorded
 * history (an activity). Never registered on a real worker.
 */
import { sleep } from '@temporalio/workflow';
import { partitionWorkflow as current } from '../../src/workflows/partition';
import type { PartitionInput } from '../../src/protocol';

export async function partitionWorkflow(input: PartitionInput): ReturnType<typeof current> {
  await sleep(1);
  return current(input);
}
