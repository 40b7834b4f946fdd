/**
 * Test support for onceflow as a user gets it: commands run in a user's environment (service
 * settings yes, this repository's test wiring no) and `npm pack` of a checkout.
 * Used by test/package.test.ts and test/quickstart.test.ts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';

/** The environment of a user's shell: service settings yes, this repository's test wiring no. */
export function userEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  for (const k of [
    'ONCEFLOW_WORKFLOW_BUNDLE',
    'ONCEFLOW_TRANSFORMS',
    'ONCEFLOW_FAULTS',
    'ONCEFLOW_FAULTS_FILE',
    'NODE_OPTIONS',
  ])
    delete env[k];
  // What npm sets for the npm process running this test (npm test → scripts/test.sh) is not a user's setting.
  for (const k of Object.keys(env)) if (/^npm_(config|package|lifecycle)_/i.test(k) && !(k in extra)) delete env[k];
  return env;
}

export interface Ran {
  code: number;
  out: string;
  err: string;
}

export function sh(
  cmd: string,
  args: string[],
  cwd: string,
  timeoutMs = 300_000,
  env: NodeJS.ProcessEnv = userEnv(),
): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, env, timeout: timeoutMs, maxBuffer: 64 << 20 }, (e, out, err) =>
      resolve({ code: e ? (typeof e.code === 'number' ? e.code : 1) : 0, out: String(out), err: String(err) }),
    );
  });
}

export async function ok(
  cmd: string,
  args: string[],
  cwd: string,
  timeoutMs?: number,
  env?: NodeJS.ProcessEnv,
): Promise<string> {
  const r = await sh(cmd, args, cwd, timeoutMs, env);
  assert.equal(r.code, 0, `${cmd} ${args.join(' ')} (in ${cwd}) failed:\n${r.out}\n${r.err}`);
  return r.out;
}

/** `npm pack` of the checkout at `root` into `dest`; the tarball's path. */
export async function pack(root: string, dest: string): Promise<string> {
  const packed = JSON.parse(await ok('npm', ['pack', '--json', '--pack-destination', dest], root, 300_000)) as {
    filename: string;
  }[];
  return join(dest, packed[0]!.filename);
}
