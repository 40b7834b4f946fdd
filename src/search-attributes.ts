/**
 * Search attributes that make pipelines findable in the Temporal Web UI and with
 * `temporal workflow list --query`. Registered by scripts/services.sh at server start
 * (docker-compose users: see docs/services.md and docs/deploy.md §2.3).
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const SEARCH_ATTRIBUTES = {
  pipeline: defineSearchAttributeKey('OnceflowPipeline', SearchAttributeType.KEYWORD),
  partition: defineSearchAttributeKey('OnceflowPartition', SearchAttributeType.INT),
  epoch: defineSearchAttributeKey('OnceflowEpoch', SearchAttributeType.INT),
  phase: defineSearchAttributeKey('OnceflowPhase', SearchAttributeType.KEYWORD),
} as const;
