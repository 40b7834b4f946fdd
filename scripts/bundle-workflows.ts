/** Bundles src/workflows once so test workers and replays start in a second instead of bundling each time. */
import { writeFileSync } from 'node:fs';
import { bundleWorkflowCode } from '@temporalio/worker';

async function main() {
  const out = process.argv[2];
  if (!out) throw new Error('usage: bundle-workflows <output file>');
  const { code } = await bundleWorkflowCode({ workflowsPath: require.resolve('../src/workflows'), logger: undefined });
  writeFileSync(out, code);
  console.log(`workflow bundle written to ${out} (${(code.length / 1024).toFixed(0)} KiB)`);
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
