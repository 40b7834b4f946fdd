#!/usr/bin/env node
// The onceflow command: runs the compiled JavaScript in dist/ (built by `npm run build`, and by
// npm itself when it installs the repository). No TypeScript toolchain is needed to run it.
let cli;
try {
  cli = require('../dist/cli/index.js');
} catch (e) {
  if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes('dist/cli/index.js')) {
    process.stderr.write('onceflow: dist/ is missing — in a checkout of the repository, run `npm run build` first\n');
    process.exit(1);
  }
  throw e;
}
// Under `npm start` or `npx onceflow`, npm signals the shell it started, not this process: stop
// when that shell is gone (src/signals.ts says why).
cli.stopWithParent();
cli.main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`onceflow: ${e && e.message ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
