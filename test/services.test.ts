/**
 * scripts/services.sh on an isolated stack of its own (ports 19xxx, its own run directory):
 * up reports all three services up, down leaves none, a port held by a foreign process is
 * reported and left alone, and a stale pid file naming another process is neither taken for the
 * service nor signalled.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const script = join(__dirname, '..', 'scripts', 'services.sh');

function services(env: Record<string, string>, ...args: string[]) {
  const r = spawnSync('bash', [script, ...args], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 300_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

test('services: up → all three up; down → none; status exit codes follow', { timeout: 400_000 }, () => {
  const env = { ONCEFLOW_RUN_DIR: mkdtempSync(join(tmpdir(), 'onceflow-stack-')), ONCEFLOW_PORT_BASE: '19000' };
  try {
    const up = services(env, 'up');
    assert.equal(up.code, 0, up.err);
    const status = services(env, 'status');
    assert.equal(status.code, 0, status.out + status.err);
    assert.match(status.out, /^temporal\s+up\s+127\.0\.0\.1:19233\s+Web UI http:\/\/127\.0\.0\.1:19234/m);
    assert.match(status.out, /^kafka\s+up\s+127\.0\.0\.1:19092/m);
    assert.match(status.out, /^mariadb\s+up\s+127\.0\.0\.1:19306/m);
    // up again is idempotent and fast: nothing is started twice
    const again = services(env, 'up');
    assert.equal(again.code, 0);
    assert.doesNotMatch(again.err, /starting/);
  } finally {
    const down = services(env, 'down');
    assert.equal(down.code, 0, down.err);
  }
  const after = services(env, 'status');
  assert.equal(after.code, 1);
  assert.match(after.out, /^temporal\s+down$/m);
  assert.match(after.out, /^kafka\s+down$/m);
  assert.match(after.out, /^mariadb\s+down$/m);
  // Each run's stack is 100+ MB (MariaDB's data files); a stopped one is removed.
  rmSync(env.ONCEFLOW_RUN_DIR, { recursive: true, force: true });
});

test(
  'services: a port held by a process that is not ours is reported and left alone',
  { timeout: 120_000 },
  async () => {
    const env = { ONCEFLOW_RUN_DIR: mkdtempSync(join(tmpdir(), 'onceflow-stack-')), ONCEFLOW_PORT_BASE: '19500' };
    const squatter = createServer(() => undefined);
    await new Promise<void>((r) => squatter.listen(19500 + 306, '127.0.0.1', r));
    try {
      const r = spawnSync('bash', [script, 'up', 'mariadb'], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
        timeout: 100_000,
      });
      assert.equal(r.status, 1);
      assert.match(r.stderr, /port 19806 is held by a process that is not onceflow's mariadb/);
      const status = services(env, 'status');
      assert.match(status.out, /^mariadb\s+foreign\s+port 19806/m);
      assert.ok(squatter.listening, 'the foreign listener was not touched');
    } finally {
      await new Promise((r) => squatter.close(r));
      rmSync(env.ONCEFLOW_RUN_DIR, { recursive: true, force: true });
    }
  },
);

test(
  'services: a stale pid file whose pid is now another process (a reboot) is not taken for the service, and that process is never signalled',
  { timeout: 200_000 },
  async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'onceflow-stack-'));
    const env = { ONCEFLOW_RUN_DIR: runDir, ONCEFLOW_PORT_BASE: '19600' };
    // The other process: alive, in a process group of its own, nothing to do with the stack.
    const other = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
    const otherAlive = () => {
      try {
        process.kill(other.pid!, 0);
        return true;
      } catch {
        return false;
      }
    };
    const plant = () => {
      for (const name of ['temporal', 'kafka', 'mariadb']) {
        mkdirSync(join(runDir, name), { recursive: true });
        writeFileSync(join(runDir, name, 'pid'), `${other.pid}\n`);
      }
    };
    try {
      plant();
      const status = services(env, 'status');
      assert.equal(status.code, 1, status.out);
      for (const name of ['temporal', 'kafka', 'mariadb'])
        assert.match(status.out, new RegExp(`^${name}\\s+down$`, 'm'));
      const diagnose = services(env, 'diagnose', 'kafka');
      assert.match(diagnose.out, new RegExp(`pid file names ${other.pid}, now another process \\(a stale pid file\\)`));
      // down signals nothing it did not start, and forgets the stale pid files.
      const down = services(env, 'down');
      assert.equal(down.code, 0, down.err);
      assert.ok(otherAlive(), 'down left the other process alone');
      assert.ok(!existsSync(join(runDir, 'kafka', 'pid')), 'down removed the stale pid file');
      // up starts the service instead of waiting on the other process.
      plant();
      const up = services(env, 'up', 'mariadb');
      assert.equal(up.code, 0, up.err);
      assert.match(up.err, /starting MariaDB/);
      assert.match(services(env, 'status', 'mariadb').out, /^mariadb\s+up\s+127\.0\.0\.1:19906/m);
    } finally {
      const down = services(env, 'down');
      assert.equal(down.code, 0, down.err);
      assert.ok(otherAlive(), 'the other process outlived the stack');
      other.kill('SIGKILL');
      rmSync(runDir, { recursive: true, force: true });
    }
  },
);
