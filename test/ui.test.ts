/**
 * The Temporal Web UI shows a running pipeline: headless Debian Chromium (driven by
 * playwright-core) searches by the OnceflowPipeline search attribute, finds the partition
 * workflows, opens one, and takes screenshots: into docs/ (the README's pictures) only with
 * UPDATE_SCREENSHOTS=1, otherwise into test/.tmp/, so a test run leaves the work tree clean.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { loadSettings } from '../src/config';
import { createOnceflowWorker } from '../src/worker';
import { openDeps, quietRuntime, type Deps } from './support/env';
import { compareTransforms } from '../examples/flink-compare/transforms';
import { drainAndWait, prepareScenario, start } from './support/pipeline';

const CHROMIUM = process.env.ONCEFLOW_CHROMIUM ?? '/usr/bin/chromium';
const UI = loadSettings().temporal.webUi;
const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === '1' ? join(__dirname, '..', 'docs') : join(__dirname, '.tmp');
let deps: Deps;
let browser: Browser;

before(async () => {
  quietRuntime();
  mkdirSync(SCREENSHOTS, { recursive: true });
  deps = await openDeps();
  assert.ok(existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM} (scripts/test.sh installs Debian's chromium)`);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
});

after(async () => {
  await browser?.close();
  await deps.close();
});

test(
  'the Web UI finds a running pipeline by its search attributes and shows its epochs',
  { timeout: 180_000 },
  async () => {
    // Slow epochs (a record at a time with waits) keep the pipeline running while the browser looks.
    const s = await prepareScenario(deps, {
      prefix: 'webui',
      records: 400,
      partitions: 2,
      epoch: { maxRecords: 20, maxWaitMs: 500 },
    });
    const codePath = process.env.ONCEFLOW_WORKFLOW_BUNDLE;
    const w = await createOnceflowWorker({
      settings: deps.settings,
      taskQueue: s.taskQueue,
      transforms: compareTransforms(),
      ...(codePath ? { worker: { workflowBundle: { codePath } } } : {}),
    });
    const running = w.run();
    try {
      const handle = await start(deps, s);
      const page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
      const query = encodeURIComponent(`OnceflowPipeline="${s.spec.name}"`);
      const partitionLink = page.getByRole('link', { name: `onceflow/${s.spec.name}/0`, exact: true });
      const otherLink = page.getByRole('link', { name: `onceflow/${s.spec.name}/1`, exact: true });
      // The visibility store indexes new workflows within a second or two; load (at most 20 times) until both show.
      for (let i = 0; i < 20; i++) {
        await page.goto(`${UI}/namespaces/default/workflows?query=${query}`, { waitUntil: 'networkidle' });
        if ((await partitionLink.isVisible()) && (await otherLink.isVisible())) break;
        await page.waitForTimeout(1000);
      }
      await page.screenshot({ path: join(SCREENSHOTS, 'web-ui-pipeline.png') });
      assert.ok(await partitionLink.isVisible(), 'partition 0 is listed');
      assert.ok(await otherLink.isVisible(), 'partition 1 is listed');
      const row = page.getByRole('row').filter({ has: partitionLink });
      assert.match(await row.innerText(), /Running/, 'the pipeline is running (it polls until drained)');

      await partitionLink.click();
      // The event history names each epoch's step through the activity summaries.
      await page
        .getByText(/prepareEpoch|epoch \d+: prepare/)
        .first()
        .waitFor({ state: 'visible', timeout: 30_000 });
      await page.screenshot({ path: join(SCREENSHOTS, 'web-ui-partition.png') });
      await page.close();
      await drainAndWait(deps, s, handle);
    } finally {
      w.shutdown();
      await running;
    }
  },
);
