/**
 * A small TCP proxy (Node `net`) that the fault campaign puts between one worker and Kafka or
 * MySQL, so it can cut that worker off for a while: `cut(ms)` resets every open connection
 * and refuses new ones (accepted, then reset at once) until the time is up.
 *
 * Kafka needs a broker listener whose advertised address is the proxy's port (see
 * ONCEFLOW_KAFKA_PROXY_LISTENERS in scripts/services.sh); otherwise the client would be
 * redirected to the broker's own address by the metadata and bypass the proxy.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export class TcpProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private cutUntil = 0;
  /** Connections reset because of a cut (evidence that the cut really hit something). */
  resets = 0;

  constructor(
    readonly name: string,
    readonly listenPort: number,
    readonly targetPort: number,
    readonly host = '127.0.0.1',
  ) {}

  get isCut(): boolean {
    return Date.now() < this.cutUntil;
  }

  async start(): Promise<void> {
    const server = createServer({ pauseOnConnect: true }, (client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.listenPort, this.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
  }

  private track(s: Socket): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
    s.on('error', () => s.destroy());
  }

  private accept(client: Socket): void {
    this.track(client);
    if (this.isCut) {
      this.resets++;
      client.resetAndDestroy();
      return;
    }
    const upstream = connect({ host: this.host, port: this.targetPort });
    this.track(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    upstream.once('connect', () => {
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    // Either side closing closes the other: the client sees what it would see without us.
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  }

  /** Resets every open connection and refuses new ones for `ms`. */
  cut(ms: number): void {
    this.cutUntil = Math.max(this.cutUntil, Date.now() + ms);
    for (const s of this.sockets) {
      this.resets++;
      if (!s.destroyed) s.resetAndDestroy();
    }
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
