/**
 * Every use of kafkajs internals lives in this folder, behind a small typed surface with its own tests
 * (test/kafka-internals.test.ts). kafkajs 2.2.4 has no public API for:
 *  - reading an exact offset range of one partition without joining a consumer group,
 *  - the producer id and epoch of a transaction (needed to commit it from another process),
 *  - EndTxn for a transaction this process did not open,
 *  - ListOffsets with an explicit isolation level,
 *  - DescribeProducers (a partition leader's state of one producer: how ../landed checks an
 *    epoch's writes before commit),
 *  - ListTransactions (the open transactions of ids no group uses any more: ../../recovery),
 *  - keeping a transaction's and a group's coordinator between requests (./coordinators),
 *  - WriteTxnMarkers, to split a transaction on purpose as a stale coordinator did (./markers: fault injection).
 * Flink reaches the same Kafka internals through reflection for the same reasons. Two more
 * replace kafkajs code on our transactions' hot path for its cost, not for a missing API:
 * ./message-producer (grouping by partition) and ./produce-request (the Produce request's encoding).
 */
export * from './cluster';
export * from './coordinators';
export * from './fetch';
export * from './list-transactions';
export * from './markers';
export * from './transaction';
export * from './producers';
