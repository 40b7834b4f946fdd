/**
 * Carrying out a planned fault (tools/chaos/schedule.ts) against the stack and the workers: at a
 * random moment, or armed as a rule of the workers' fault file (src/faults.ts) at a protocol step
 * and confirmed by the hit's line; then the kill, restart, cut or freeze itself.
 */
import { writeFileSync } from 'node:fs';
import type { FaultPoint } from '../../src/faults';
import { groupOf, groupTransactionalId, transactionalId } from '../../src/spec';
import { nodeServices, partitionLeader, quorumLeader, transactionCoordinator } from './cluster';
import type { WorkerReports } from './observe';
import { FaultWindow, retryDb, retryUntil, type LedgerProbe } from './recovery';
import { SPLIT_KIND, type ClusterKind, type PlannedFault } from './schedule';
import { sleep, type CampaignEnv } from './setup';
import type { TcpProxy } from './proxy';
import { services, type ServiceFreezer, type WorkerSupervisor } from './stack';
import type { FaultRecord } from './types';

const HOLD_MS = 1500;
/**
 * A frozen worker stays stopped past the activities' heartbeat timeout (10 s), so its attempts
 * time out and become zombies. A worker freeze outlasts the recovery bound: the other worker
 * must carry every partition on meanwhile (its recovery is measured from the freeze's start).
 */
const FREEZE_MS = 45_000;

export class Injector {
  /** The active controller as asked just before a controller kill was armed. */
  private controllerNow: number | undefined;
  /**
   * A worker freeze is owed liveness from its start only while the other worker is healthy:
   * the next freeze waits until the last one has thawed (seed 20261130 at 2da9e02 froze the
   * second worker while the first was frozen, and fault #22 waited out the first one's thaw).
   */
  private workerThawAt = 0;
  private readonly services0: Map<number, string>;

  constructor(
    private readonly env: CampaignEnv,
    private readonly workers: WorkerSupervisor,
    private readonly freezer: ServiceFreezer,
    private readonly reports: WorkerReports,
    private readonly ledger: LedgerProbe,
  ) {
    this.services0 = nodeServices(env.stack);
  }

  /** The workers' fault rules (none: disarmed). */
  arm(rules: string[]): void {
    writeFileSync(this.env.faultsFile, rules.join('\n'));
  }

  /** Waits the fault's delay, then injects it; `rec.injected` says whether it was. The window recovery is measured from. */
  async carryOut(f: PlannedFault, rec: FaultRecord): Promise<FaultWindow> {
    await sleep(f.delayMs);
    if (f.kind === 'worker-freeze' && Date.now() < this.workerThawAt) await sleep(this.workerThawAt - Date.now());
    const win = new FaultWindow(this.ledger);
    if (f.trigger === 'random') await this.atRandom(f, rec, win);
    else await this.atStep(f, f.trigger, rec, win);
    return win;
  }

  /**
   * Injects the fault now (up to 5 tries, 2 s apart): a fault that did nothing — a worker fault
   * that found no process, a cut that found no connection — is tried again, as at a protocol step.
   */
  private async atRandom(f: PlannedFault, rec: FaultRecord, win: FaultWindow): Promise<void> {
    const { env } = this;
    for (let tries = 0; tries < 5 && !rec.injected; tries++) {
      if (tries > 0) await sleep(2000);
      await win.snapshot();
      win.partitions = Array.from({ length: env.o.partitions }, (_, p) => p);
      // The epoch a transaction coordinator kill names the transactional id by: the partition's next, or its group's.
      const next =
        env.grouped && f.kind === 'kafka-txn-coordinator-kill'
          ? await this.groupEpoch(f.partition)
          : (win.before.get(f.partition) ?? -1) + 1;
      const lasts = await this.inject(f.kind, f.worker, f, rec, next);
      if (lasts === null) {
        env.log(`#${f.n} ${f.kind} @ random: nothing injected (${rec.note.trim().replace(/;$/, '')}); tried again`);
        continue;
      }
      if (f.kind === 'worker-freeze') this.workerThawAt = Date.now() + FREEZE_MS + 1000;
      rec.faultMs = Math.max(Date.now() - win.t0, lasts);
      rec.injected = true;
    }
  }

  /** Arms the fault at a protocol step of an epoch ahead (up to 5 tries), and when a worker's line says it hit, carries the rest out. */
  private async atStep(f: PlannedFault, point: FaultPoint, rec: FaultRecord, win: FaultWindow): Promise<void> {
    const { env } = this;
    const { spec, grouped } = env;
    const T = env.o.transactionTimeoutMs;
    for (let tries = 0; tries < 5 && !rec.injected; tries++) {
      // The controller is asked before the epoch is picked and armed (a JVM start, seconds under
      // load: the partition would pass the epoch meanwhile), so the kill follows the hit at once.
      if (f.kind === 'kafka-controller-kill')
        this.controllerNow = await quorumLeader(env.kafkaLibsDir!, env.settings.kafka.brokers).catch(() => undefined);
      // A grouped pipeline's hits name the group epoch and the group; a partition's name its own epoch.
      const { epoch: e, hitAs } = grouped
        ? await this.groupTarget(f.partition)
        : { epoch: ((await retryDb(this.ledger.ledgerMax)).get(f.partition) ?? -1) + 2, hitAs: [f.partition] };
      this.arm(stepRules(f, point, e, hitAs, grouped ? groupOf(spec, f.partition) : f.partition, T));
      const hit = await this.reports.waitLine(
        (l) => l.point === point && l.epoch === e && hitAs.includes(l.partition) && l.attempt === 1,
        point === 'redo.start' || f.kind === 'txn-timeout' ? T + 60_000 : 45_000,
      );
      this.arm([]);
      if (!hit) {
        // Where the unit was when the wait gave up tells a passed epoch from a stalled unit.
        const now = grouped
          ? `group epoch ${await this.groupEpoch(f.partition)}`
          : `ledger at epoch ${(await retryDb(this.ledger.ledgerMax)).get(f.partition) ?? 'none'}`;
        rec.note += `no hit at epoch ${e} (${now} then); `;
        env.log(`#${f.n} ${f.kind} @ ${point}: no hit at epoch ${e}, ${now} then; armed again`);
        continue;
      }
      if (point === 'redo.start') this.reports.evidence.txnTimeoutPrecursors++;
      await win.snapshot();
      rec.injected = true;
      rec.epoch = e;
      rec.hitWorker = hit.worker;
      if (grouped) rec.group = groupOf(spec, f.partition);
      // A group epoch is every member's: each must progress again.
      win.partitions = grouped ? env.membersOf(groupOf(spec, f.partition)) : [f.partition];
      // The other worker is healthy: liveness is owed from the freeze's start, not from the thaw.
      if (f.kind === 'worker-freeze') {
        rec.faultMs = 0;
        this.workerThawAt = Date.now() + FREEZE_MS + 1000;
      } else if (f.kind === 'txn-timeout') rec.faultMs = T + 4000;
      else if (f.kind === 'worker-kill' || f.kind === SPLIT_KIND) rec.faultMs = 0;
      else {
        const lasts = await this.inject(f.kind, hit.worker, f, rec, e);
        // Nothing injected (no worker process to signal, a cut that found no connection): armed again.
        if (lasts === null) {
          rec.injected = false;
          continue;
        }
        rec.faultMs = Math.max(Date.now() - win.t0, lasts);
      }
    }
  }

  /**
   * Signals worker i with `act` (kill or freeze) once it has a process — one killed just before is
   * restarted after 0.5 s —; false, with a note, if none came within 10 s.
   */
  private async signal(i: number, act: (i: number) => number | undefined, rec?: FaultRecord): Promise<boolean> {
    const deadline = Date.now() + 10_000;
    while (this.workers.pid(i) === undefined && Date.now() < deadline) await sleep(100);
    if (act(i) !== undefined) return true;
    if (rec) rec.note += `worker ${i} had no process to signal; `;
    return false;
  }

  /**
   * Cuts a worker off for `ms` and waits the cut out; false, with a note, if it reset nothing: no
   * connection was open and none was tried meanwhile (seed 20261203's one Kafka cut landed 3 s
   * after a worker kill, while the new worker had not yet connected, and cut nothing).
   */
  private async cut(proxy: TcpProxy, ms: number, rec?: FaultRecord): Promise<boolean> {
    const before = proxy.resets;
    proxy.cut(ms);
    await sleep(ms);
    if (proxy.resets > before) return true;
    if (rec) rec.note += `the ${proxy.name} cut reset no connection; `;
    return false;
  }

  /**
   * Injects a fault; resolves when the injection returned, with how long the fault lasts from its
   * start (freezes outlast it), or null when nothing was injected: a worker fault found no
   * process to signal, a cut no connection. A compound fault of which a part happened counts (the note names the
   * worker that had no process).
   */
  private async inject(
    kind: PlannedFault['kind'],
    worker: number,
    f: PlannedFault,
    rec?: FaultRecord,
    epoch?: number,
  ): Promise<number | null> {
    const { stack, proxies } = this.env;
    switch (kind) {
      case 'kafka-txn-coordinator-kill':
      case 'kafka-leader-kill':
      case 'kafka-controller-kill':
        await this.killNode(kind, f, rec, epoch ?? 0);
        return 0;
      case 'worker-kill':
        return (await this.signal(worker, (i) => this.workers.kill(i), rec)) ? 0 : null;
      case 'worker-freeze':
        // Measured from the freeze's start, as at a protocol step: the other worker carries on.
        return (await this.signal(worker, (i) => this.workers.freeze(i, FREEZE_MS), rec)) ? 0 : null;
      case 'kafka-restart':
      case 'mariadb-restart':
      case 'temporal-restart':
        await services(stack, ['restart', kind.replace('-restart', '')]);
        return 0;
      case 'kafka-restart-hard':
      case 'mariadb-restart-hard':
      case 'temporal-restart-hard':
        await services(stack, ['restart', kind.replace('-restart-hard', ''), '--hard']);
        return 0;
      case 'kafka-cut':
        return (await this.cut(proxies.kafka[worker]!, f.cutMs, rec)) ? f.cutMs : null;
      case 'mysql-cut':
        return (await this.cut(proxies.mysql[worker]!, f.cutMs, rec)) ? f.cutMs : null;
      case 'temporal-freeze':
      case 'kafka-freeze':
      case 'mariadb-freeze':
        await this.freezer.freeze(stack, kind.replace('-freeze', '') as 'temporal' | 'kafka' | 'mariadb', f.freezeMs);
        return f.freezeMs;
      case 'worker-kill+kafka-restart':
        await this.signal(worker, (i) => this.workers.kill(i), rec);
        await services(stack, ['restart', 'kafka']);
        return 0;
      case 'workers-kill-all': {
        let killed = 0;
        for (let i = 0; i < this.env.o.workers; i++)
          if (await this.signal(i, (j) => this.workers.kill(j), rec)) killed++;
        return killed > 0 ? 0 : null;
      }
      case 'mariadb+temporal-restart':
        await Promise.all([services(stack, ['restart', 'mariadb']), services(stack, ['restart', 'temporal'])]);
        return 0;
      case 'txn-timeout':
      case SPLIT_KIND:
        return 0;
    }
  }

  /** A cluster kind: SIGKILL of the node it targets, then `services.sh up` of that node. */
  private async killNode(
    kind: ClusterKind,
    f: PlannedFault,
    rec: FaultRecord | undefined,
    epoch: number,
  ): Promise<void> {
    const { stack } = this.env;
    const { node, why } = await this.clusterTarget(kind, f, epoch);
    const service = nodeServices(stack).get(node) ?? this.services0.get(node) ?? `kafka-${node}`;
    if (rec) {
      rec.node = node;
      rec.target = `node ${node} (${service}): ${why}`;
    }
    await services(stack, ['kill', service]);
    await services(stack, ['up', service]);
  }

  /**
   * Grouped pipeline: the group epoch a protocol-step fault is armed at — two past the group's
   * counter (the epoch at the counter may already be preparing, inside the commit activity of the
   * one before), like a partition's last committed epoch + 2 — and the partition value its hit
   * carries: the group.
   */
  private async groupTarget(partition: number): Promise<{ epoch: number; hitAs: number[] }> {
    return { epoch: (await this.groupEpoch(partition)) + 2, hitAs: [groupOf(this.env.spec, partition)] };
  }

  /** The group epoch the runner of the partition's group reports now (its status query). */
  private async groupEpoch(partition: number): Promise<number> {
    const g = groupOf(this.env.spec, partition);
    return (await retryUntil(() => this.env.groupStatus(g), 60_000)).groupEpoch;
  }

  /** The node a cluster kind kills, asked of the cluster at the moment of the fault. */
  private async clusterTarget(
    kind: ClusterKind,
    f: PlannedFault,
    epoch: number,
  ): Promise<{ node: number; why: string }> {
    const { spec, name, grouped, cluster, admin, kafkaLibsDir, settings } = this.env;
    const retry = <T>(fn: () => Promise<T>) => retryUntil(fn, 30_000);
    if (kind === 'kafka-txn-coordinator-kill') {
      const slots = spec.kafkaSink.transactionalIdPool;
      const tid = grouped
        ? groupTransactionalId(name, groupOf(spec, f.partition), epoch % slots)
        : transactionalId(name, f.partition, epoch % slots);
      return {
        node: await retry(() => transactionCoordinator(cluster, tid)),
        why: `transaction coordinator of ${tid} (epoch ${epoch})`,
      };
    }
    if (kind === 'kafka-leader-kill') {
      // Odd faults hit the source partition's leader, even ones the output partition's.
      const topic = f.n % 2 === 1 ? spec.source.topic : spec.kafkaSink.topic;
      return {
        node: await retry(() => partitionLeader(admin, topic, f.partition)),
        why: `leader of ${topic === spec.source.topic ? 'source' : 'output'} ${topic}[${f.partition}]`,
      };
    }
    const asked = this.controllerNow;
    this.controllerNow = undefined;
    if (asked !== undefined) return { node: asked, why: 'active KRaft controller (metadata quorum leader)' };
    return {
      node: await retry(() => quorumLeader(kafkaLibsDir!, settings.kafka.brokers)),
      why: 'active KRaft controller (metadata quorum leader)',
    };
  }
}

/**
 * The fault-file rules for a protocol-step fault at epoch `e`: the action at the step for each
 * partition value the hit may carry, and a commit stalled past the transaction timeout `T` for a
 * txn-timeout (alone) or before a redo.start (which needs one to happen).
 */
function stepRules(
  f: PlannedFault,
  point: FaultPoint,
  e: number,
  hitAs: number[],
  stallAs: number,
  T: number,
): string[] {
  const at = (p: number) => `@epoch=${e}@partition=${p}@attempt=1`;
  const action =
    f.kind === 'worker-kill'
      ? 'crash'
      : f.kind === 'worker-freeze'
        ? `freeze=${FREEZE_MS}`
        : f.kind === SPLIT_KIND
          ? `split=${f.n % 2 ? 'markers' : 'outputs'}`
          : `stall=${HOLD_MS}`;
  const stallPastTimeout = `commit.before${at(stallAs)}:stall=${T + 4000}`;
  return f.kind === 'txn-timeout'
    ? [stallPastTimeout]
    : [...(point === 'redo.start' ? [stallPastTimeout] : []), ...hitAs.map((p) => `${point}${at(p)}:${action}`)];
}
