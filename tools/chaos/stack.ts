/**
 * The campaign's own, isolated service stack (scripts/services.sh with its own run directory
 * and port base, plus proxied Kafka listeners), its TCP proxies and its supervised worker
 * processes. Nothing here touches the development services on the default ports.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { TcpProxy } from './proxy';

export const ROOT = join(__dirname, '..', '..');

export interface StackOptions {
  runDir: string;
  portBase: number;
  workers: number;
  /** Kafka nodes (services.sh ONCEFLOW_KAFKA_NODES); above 1 the cluster runs without the proxied listeners. */
  kafkaNodes?: number;
  /** Dedicated KRaft controllers beside the nodes (services.sh ONCEFLOW_KAFKA_CONTROLLERS: services kafka-3…kafka-5); 0 or absent: combined nodes. */
  kafkaControllers?: number;
}

/** Ports of an isolated stack (services.sh derives Temporal/Kafka/MariaDB ports from the base). */
export function stackPorts(o: StackOptions) {
  return {
    temporal: o.portBase + 233,
    kafka: o.portBase + 92,
    mysql: o.portBase + 306,
    /** Broker listener PROXIEDi, reached only through worker i's Kafka proxy. */
    kafkaListener: (i: number) => o.portBase + 94 + i,
    kafkaProxy: (i: number) => o.portBase + 194 + i,
    mysqlProxy: (i: number) => o.portBase + 396 + i,
  };
}

/** The inherited environment without onceflow settings, so nothing leaks in from the dev stack. */
export function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  // ONCEFLOW_HOME and the Kafka version carry over (`ONCEFLOW_KAFKA_VERSION=4.4.0 npm test` runs the
  // campaign's stacks on Kafka 4 too; a run directory keeps the version it was formatted with, so
  // use a separate ONCEFLOW_HOME for another version); every address and setting is the stack's.
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('ONCEFLOW_') || k === 'ONCEFLOW_HOME' || k === 'ONCEFLOW_KAFKA_VERSION') env[k] = v;
  return env;
}

export function servicesEnv(o: StackOptions): NodeJS.ProcessEnv {
  const p = stackPorts(o);
  const base = { ...cleanEnv(), ONCEFLOW_RUN_DIR: o.runDir, ONCEFLOW_PORT_BASE: String(o.portBase) };
  // The proxied listeners are single-node only: a cluster campaign's workers reach every node directly.
  // Controllers unset: the run directory's saved layout (services.sh), so a stop reaches every node it started.
  if ((o.kafkaNodes ?? 1) > 1)
    return {
      ...base,
      ONCEFLOW_KAFKA_NODES: String(o.kafkaNodes),
      ...(o.kafkaControllers !== undefined ? { ONCEFLOW_KAFKA_CONTROLLERS: String(o.kafkaControllers) } : {}),
    };
  const listeners = Array.from({ length: o.workers }, (_, i) => `${p.kafkaListener(i)}:${p.kafkaProxy(i)}`).join(',');
  return { ...base, ONCEFLOW_KAFKA_PROXY_LISTENERS: listeners };
}

/** Runs `scripts/services.sh <args>` against the isolated stack; rejects with its output on failure. */
export function services(o: StackOptions, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [join(ROOT, 'scripts', 'services.sh'), ...args], {
      cwd: ROOT,
      env: servicesEnv(o),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const keep = (d: Buffer) => {
      out = (out + d.toString()).slice(-4000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`services.sh ${args.join(' ')} exited with ${code}:\n${out}`)),
    );
  });
}

/** The pid (process-group leader) of one of the stack's services, from scripts/services.sh. */
export function servicePid(o: StackOptions, service: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [join(ROOT, 'scripts', 'services.sh'), 'pid', service], {
      cwd: ROOT,
      env: servicesEnv(o),
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const pid = Number(out.trim());
      if (code === 0 && Number.isInteger(pid) && pid > 0) resolve(pid);
      else reject(new Error(`services.sh pid ${service}: ${service} is not running`));
    });
  });
}

/**
 * Freezes a service: SIGSTOP to its whole process group, SIGCONT after `ms` (a paused VM, a
 * stalled disk). `thawAll` sends SIGCONT at once to everything still frozen (the campaign's
 * clean-up), so a failing campaign never leaves a service stopped.
 */
export class ServiceFreezer {
  /** Each frozen process group: its thaw timer and the resolve of the freeze awaiting it. */
  private readonly frozen = new Map<number, { timer: NodeJS.Timeout; done: () => void }>();

  async freeze(o: StackOptions, service: 'temporal' | 'kafka' | 'mariadb', ms: number): Promise<void> {
    const pid = await servicePid(o, service);
    process.kill(-pid, 'SIGSTOP');
    await new Promise<void>((done) => this.frozen.set(pid, { timer: setTimeout(() => this.thaw(pid), ms), done }));
  }

  /** SIGCONT to the group; the freeze that stopped it returns (also when thawAll comes first). */
  private thaw(pid: number): void {
    const f = this.frozen.get(pid);
    this.frozen.delete(pid);
    if (f) clearTimeout(f.timer);
    try {
      process.kill(-pid, 'SIGCONT');
    } catch {
      // already gone
    }
    f?.done();
  }

  thawAll(): void {
    for (const pid of [...this.frozen.keys()]) this.thaw(pid);
  }
}

export function startProxies(o: StackOptions): {
  kafka: TcpProxy[];
  mysql: TcpProxy[];
  start(): Promise<void>;
  close(): Promise<void>;
} {
  const p = stackPorts(o);
  // No Kafka proxies for a cluster (the proxied listeners are single-node only).
  const kafka =
    (o.kafkaNodes ?? 1) > 1
      ? []
      : Array.from({ length: o.workers }, (_, i) => new TcpProxy(`kafka-${i}`, p.kafkaProxy(i), p.kafkaListener(i)));
  const mysql = Array.from({ length: o.workers }, (_, i) => new TcpProxy(`mysql-${i}`, p.mysqlProxy(i), p.mysql));
  const all = [...kafka, ...mysql];
  return {
    kafka,
    mysql,
    start: async () => void (await Promise.all(all.map((x) => x.start()))),
    close: async () => void (await Promise.all(all.map((x) => x.close()))),
  };
}

export interface WorkerExit {
  worker: number;
  pid: number;
  signal: NodeJS.Signals | null;
  code: number | null;
  at: number;
  /** Exited while the supervisor was stopping the workers (not a fault). */
  duringStop: boolean;
}

/**
 * Worker processes (tools/chaos/worker.ts), each restarted shortly after it dies, as a process
 * supervisor would. Every stderr line goes to the worker's log file and to `onLine`.
 */
export class WorkerSupervisor {
  private readonly procs: (ChildProcess | undefined)[] = [];
  private readonly logs: WriteStream[] = [];
  private stopping = false;
  readonly exits: WorkerExit[] = [];
  starts = 0;

  constructor(
    private readonly n: number,
    private readonly envFor: (i: number) => NodeJS.ProcessEnv,
    private readonly logDir: string,
    private readonly onLine: (worker: number, line: string) => void,
  ) {}

  start(): void {
    for (let i = 0; i < this.n; i++) {
      this.logs[i] = createWriteStream(join(this.logDir, `worker-${i}.log`), { flags: 'a' });
      this.spawnOne(i);
    }
  }

  private spawnOne(i: number): void {
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'tools', 'chaos', 'worker.ts')], {
      cwd: ROOT,
      env: this.envFor(i),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.starts++;
    this.procs[i] = child;
    const log = this.logs[i]!;
    log.write(`--- ${new Date().toISOString()} worker ${i} started pid=${child.pid}\n`);
    let partial = '';
    child.stderr?.on('data', (d: Buffer) => {
      log.write(d);
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const l of lines) this.onLine(i, l);
    });
    child.on('exit', (code, signal) => {
      this.exits.push({ worker: i, pid: child.pid ?? -1, code, signal, at: Date.now(), duringStop: this.stopping });
      log.write(`--- ${new Date().toISOString()} worker ${i} pid=${child.pid} exited code=${code} signal=${signal}\n`);
      if (this.procs[i] === child) this.procs[i] = undefined;
      if (!this.stopping) setTimeout(() => !this.stopping && this.spawnOne(i), 500);
    });
  }

  pid(i: number): number | undefined {
    return this.procs[i]?.pid;
  }

  workerOfPid(pid: number): number | undefined {
    const i = this.procs.findIndex((p) => p?.pid === pid);
    return i >= 0 ? i : undefined;
  }

  /** SIGSTOP of worker i for `ms`, then SIGCONT (a GC pause, a suspended VM, a throttled container). */
  freeze(i: number, ms: number): number | undefined {
    const p = this.procs[i];
    if (!p?.pid) return undefined;
    p.kill('SIGSTOP');
    setTimeout(() => p.kill('SIGCONT'), ms).unref();
    return p.pid;
  }

  kill(i: number): number | undefined {
    const p = this.procs[i];
    if (!p?.pid) return undefined;
    p.kill('SIGKILL');
    return p.pid;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(
      this.procs.map(
        (p) =>
          new Promise<void>((resolve) => {
            if (!p || p.exitCode !== null || p.signalCode !== null) return resolve();
            const t = setTimeout(() => p.kill('SIGKILL'), 20_000);
            p.once('exit', () => {
              clearTimeout(t);
              resolve();
            });
            p.kill('SIGTERM');
          }),
      ),
    );
    await Promise.all(this.logs.map((l) => new Promise<void>((r) => l.end(() => r()))));
  }
}
