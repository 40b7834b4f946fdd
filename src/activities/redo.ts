/** The redo of an epoch whose Kafka transaction the broker aborted (never "log and lose"). */
import type { CommitArgs } from '../protocol';
import { edge, type ActivityContext } from './context';
import { redoKafkaSide } from './kafka-side';
import { sourceOf } from './source';

export function createRedo(ctx: ActivityContext) {
  return {
    async redoKafka(args: CommitArgs): Promise<{ redone: boolean }> {
      const { spec, partition, prepared } = args;
      return edge(async () => {
        await ctx.hit('redo.start', { partition, epoch: prepared.epoch });
        const redone = await redoKafkaSide(ctx, spec, partition, { epoch: prepared.epoch, start: prepared.start, end: prepared.end, xid: prepared.xid, markerFrom: prepared.kafka.markerOffset, original: prepared.kafka }, sourceOf(args));
        return { redone };
      });
    },
  };
}
