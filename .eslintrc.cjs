/* Lint: strict TypeScript, no floating promises, and a sandbox rule for workflow code. */
module.exports = {
  root: true,
  parser: '@typescript-eslint/parser',
  parserOptions: { project: './tsconfig.json', tsconfigRootDir: __dirname },
  plugins: ['@typescript-eslint'],
  extends: ['eslint:recommended', 'plugin:@typescript-eslint/recommended'],
  env: { node: true, es2022: true },
  ignorePatterns: ['dist', 'node_modules', '.eslintrc.cjs'],
  rules: {
    '@typescript-eslint/no-floating-promises': 'error',
    '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    '@typescript-eslint/no-var-requires': 'off',
    '@typescript-eslint/no-require-imports': 'off',
  },
  overrides: [
    {
      // node:test's test()/describe() return promises the runner awaits itself.
      files: ['test/**/*.test.ts'],
      rules: { '@typescript-eslint/no-floating-promises': 'off' },
    },
    {
      // Workflow code is bundled and sandboxed: deterministic, no I/O, no clients.
      files: ['src/workflows/**/*.ts'],
      rules: {
        '@typescript-eslint/no-restricted-imports': [
          'error',
          {
            patterns: [
              { group: ['node:*', 'fs', 'path', 'os', 'crypto', 'net', 'http', 'child_process', 'timers'], message: 'Workflow code may not use Node built-ins.' },
              { group: ['kafkajs', 'kafkajs/*', 'mysql2', 'mysql2/*'], message: 'Workflow code may not use Kafka or MySQL clients; call an activity.' },
              { group: ['@temporalio/worker', '@temporalio/client', '@temporalio/activity'], message: 'Workflow code imports only @temporalio/workflow and @temporalio/common.' },
              { group: ['../activities', '../activities/*', '../kafka/*', '../mysql/*', '../config', '../worker', '../client', '../verify', '../scenario'], allowTypeImports: true, message: 'Workflow code may import activities and clients as types only (`import type`).' },
            ],
          },
        ],
        'no-restricted-globals': ['error', 'setTimeout', 'setInterval', 'process', 'Buffer'],
        '@typescript-eslint/consistent-type-imports': 'error',
      },
    },
  ],
};
