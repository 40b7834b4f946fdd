/** The onceflow command run in this process, as a user types it: its exit code and what it wrote. */
import { main } from '../../src/cli';

export async function cli(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(args, { stdout: (s) => void (out += s), stderr: (s) => void (err += s) });
  return { code, out, err };
}
