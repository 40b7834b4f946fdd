/**
 * The OnceflowEpoch search attribute of a partition or group workflow (workflow code: runs in
 * the workflow sandbox).
 *
 * Runs recorded before epoch-attribute-v1 upsert it after every committed epoch: one history
 * event and one visibility update per epoch (in a paced run of ~20 group epochs a second the
 * Temporal server used 0.38 cores with them, 0.35 without; docs/performance-history.md, change 21).
 * Since the patch it is upserted at most once per
 * EPOCH_ATTRIBUTE_EVERY_MS of workflow time while epochs run, and whenever the phase attribute
 * changes (pause, stop, done), so a paused, stopped or drained workflow shows its last committed
 * epoch; a failed one may show the epoch of up to EPOCH_ATTRIBUTE_EVERY_MS before it failed (no
 * phase marks a failure). Each run sets it at its start as before. The status query and the
 * activity summaries always have the current epoch.
 */
import { patched, upsertSearchAttributes } from '@temporalio/workflow';
import { SEARCH_ATTRIBUTES } from '../search-attributes';

export const EPOCH_ATTRIBUTE_PATCH = 'epoch-attribute-v1';
export const EPOCH_ATTRIBUTE_EVERY_MS = 10_000;

export function epochAttribute() {
  let shown: number | undefined;
  let shownAt = -Infinity;
  let latest: number | undefined;
  const note = (epoch: number) => {
    shown = epoch;
    shownAt = Date.now(); // workflow time: the same on replay
  };
  const upsert = (epoch: number) => {
    upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.epoch, value: epoch }]);
    note(epoch);
  };
  return {
    /** The run's first value (after its reconcile): upserted here unless the caller upserted it with other attributes. */
    start(epoch: number, upserted = false) {
      if (upserted) note(epoch);
      else upsert(epoch);
    },
    /** An epoch was committed; `epoch` is the next one. */
    committed(epoch: number) {
      if (!patched(EPOCH_ATTRIBUTE_PATCH) || Date.now() - shownAt >= EPOCH_ATTRIBUTE_EVERY_MS) upsert(epoch);
      else latest = epoch;
    },
    /** Called where the phase attribute changes: shows an epoch held back by the interval. */
    flush() {
      if (latest !== undefined && latest !== shown) upsert(latest);
      latest = undefined;
    },
  };
}
