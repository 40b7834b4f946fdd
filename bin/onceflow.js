#!/usr/bin/env node
// The onceflow command: runs the TypeScript sources through tsx (a runtime dependency).
require('tsx/cjs');
const { main } = require('../src/cli/index.ts');
main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`onceflow: ${e && e.message ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
