/**
 * kafkajs's message producer (producer/messageProducer.js), loaded privately for our
 * transactions with one change: a send's messages are grouped by partition in linear time.
 *
 * kafkajs's groupMessagesPerPartition copies a partition's whole array for every message it adds
 * (`[...current, message]`): a send of n records to one partition copies n²/2 references and
 * allocates as much garbage. An epoch sends up to 512 KiB per partition in a request (~2,600
 * records of 200 bytes), and a CPU profile of a benchmark worker showed that grouping at 7% of the worker's
 * CPU, with the garbage on top (docs/performance-history.md, change 18).
 *
 * sendMessages.js binds the grouping when it is first required, so the producer and its
 * sendMessages are required once more with the linear grouping in the module cache, and the
 * cache is then put back: kafkajs's own producers (the baseline's, the admin's) keep theirs.
 */
/* eslint-disable @typescript-eslint/no-var-requires, @typescript-eslint/no-explicit-any */

const GROUPING = require.resolve('kafkajs/src/producer/groupMessagesPerPartition');
const SEND = require.resolve('kafkajs/src/producer/sendMessages');
const PRODUCER = require.resolve('kafkajs/src/producer/messageProducer');

type Grouping = (args: {
  topic: string;
  partitionMetadata: unknown[];
  messages: any[];
  partitioner: (a: { topic: string; partitionMetadata: unknown[]; message: any }) => number;
}) => Record<number, any[]>;

/** The same result as kafkajs's grouping (each partition's messages in send order), in one pass. */
export const groupMessagesLinear: Grouping = ({ topic, partitionMetadata, messages, partitioner }) => {
  const out: Record<number, any[]> = {};
  if (partitionMetadata.length === 0) return out;
  for (const message of messages) (out[partitioner({ topic, partitionMetadata, message })] ??= []).push(message);
  return out;
};

/** kafkajs's createMessageProducer, its sends grouped by `grouping`. */
export function messageProducerWith(grouping: Grouping): (options: any) => any {
  const kafkajsGrouping = require(GROUPING);
  const cached = [SEND, PRODUCER].map((k) => [k, require.cache[k]] as const);
  try {
    require.cache[GROUPING]!.exports = grouping;
    for (const [k] of cached) delete require.cache[k];
    return require(PRODUCER);
  } finally {
    require.cache[GROUPING]!.exports = kafkajsGrouping;
    for (const [k, m] of cached) {
      if (m) require.cache[k] = m;
      else delete require.cache[k];
    }
  }
}

export const createMessageProducer = messageProducerWith(groupMessagesLinear);
