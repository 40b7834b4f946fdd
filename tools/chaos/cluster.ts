/**
 * The cluster campaign's view of a 3-node KRaft cluster (scripts/services.sh with
 * ONCEFLOW_KAFKA_NODES=3, services kafka-0, kafka-1, kafka-2, and with ONCEFLOW_KAFKA_CONTROLLERS=3
 * the dedicated controllers kafka-3, kafka-4, kafka-5): which node is the transaction
 * coordinator of a transactional id, the leader of a partition, the active controller; which
 * service runs a node; and whether the cluster is whole again after a node came back.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Admin } from 'kafkajs';
import { COORDINATOR, type KafkaCluster } from '../../src/kafka/internals';
import type { StackOptions } from './stack';

/** The node whose transaction coordinator owns `transactionalId`: asked of FindCoordinator each time, never the worker's remembered answer. */
export async function transactionCoordinator(cluster: KafkaCluster, transactionalId: string): Promise<number> {
  const broker = await cluster.raw.findGroupCoordinator({
    groupId: transactionalId,
    coordinatorType: COORDINATOR.TRANSACTION,
  });
  return Number(broker.nodeId);
}

/** The leader of topic[partition], from a fresh metadata request. */
export async function partitionLeader(admin: Admin, topic: string, partition: number): Promise<number> {
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  const p = md.topics[0]?.partitions.find((x) => x.partitionId === partition);
  if (!p || p.leader < 0) throw new Error(`no leader for ${topic}[${partition}]`);
  return p.leader;
}

/**
 * The active KRaft controller (the metadata quorum's leader). Not admin.describeCluster's
 * controller id: a KRaft broker answers DescribeCluster with a random live broker (KIP-590), so
 * Kafka's own MetadataQuorumCommand (DescribeQuorum) is asked.
 */
export function quorumLeader(kafkaLibs: string, brokers: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile(
      'java',
      [
        '-Xmx128m',
        '-XX:TieredStopAtLevel=1',
        '-cp',
        `${kafkaLibs}/*`,
        'org.apache.kafka.tools.MetadataQuorumCommand',
        '--bootstrap-server',
        brokers.join(','),
        'describe',
        '--status',
      ],
      { timeout: 60_000 },
      (err, stdout, stderr) => {
        const m = /LeaderId:\s+(\d+)/.exec(stdout);
        if (m) resolve(Number(m[1]));
        else
          reject(
            new Error(
              `kafka-metadata-quorum describe --status gave no leader: ${err ? String(err) : ''} ${stderr.slice(-500)}`,
            ),
          );
      },
    );
  });
}

/**
 * Node id → services.sh service name. Each node's server.properties in the run directory names
 * its node.id (looked for in <run>/kafka-<i>/ and <run>/kafka/<i>/); failing that, kafka-<i>
 * runs node i.
 */
export function nodeServices(stack: StackOptions): Map<number, string> {
  const n = (stack.kafkaNodes ?? 1) + (stack.kafkaControllers ?? 0);
  const map = new Map<number, string>();
  for (let i = 0; i < n; i++) {
    const service = `kafka-${i}`;
    let id = i;
    for (const f of [
      join(stack.runDir, service, 'server.properties'),
      join(stack.runDir, 'kafka', String(i), 'server.properties'),
      join(stack.runDir, service, 'config', 'server.properties'),
    ]) {
      if (!existsSync(f)) continue;
      const m = /^node\.id=(\d+)/m.exec(readFileSync(f, 'utf8'));
      if (m) {
        id = Number(m[1]);
        break;
      }
    }
    map.set(id, service);
  }
  return map;
}

/**
 * True when every node is registered again and every partition of `topics` has its full ISR
 * (so the next node killed leaves 2 of 3 replicas of everything).
 */
export async function clusterWhole(admin: Admin, nodes: number, topics: string[]): Promise<boolean> {
  const c = await admin.describeCluster();
  if (c.brokers.length < nodes) return false;
  const md = await admin.fetchTopicMetadata({ topics });
  return md.topics.every((t) =>
    t.partitions.every((p) => p.leader >= 0 && p.isr.length >= Math.min(nodes, p.replicas.length)),
  );
}
