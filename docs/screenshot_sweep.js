// The runs table with the sweep's parent run expanded (headless Chromium has no way to click it from the
// command line). Called by docs/screenshots.py when Node.js and playwright-core are installed
// (`npm install playwright-core`; NODE_PATH pointing at its node_modules):
//   node docs/screenshot_sweep.js <runs-table URL> <out.png>
const { chromium } = require('playwright-core');

(async () => {
  const [url, out] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
           '--disable-sync', '--no-first-run'],
  });
  const page = await browser.newPage({ viewport: { width: 1500, height: 900 } });
  await page.goto(url);
  await page.waitForSelector('text=Run Name', { timeout: 60000 });
  await page.waitForTimeout(3000);
  // the parent row's expander is the box just left of its run name (the sweep's parent is named after it)
  const parent = page.locator(`text=${process.env.SWEEP_LABEL || 'multirun'}`).first();
  const box = await parent.boundingBox();
  if (!box) throw new Error('no sweep parent row on the page');
  await page.mouse.click(box.x - 24, box.y + box.height / 2);
  await page.waitForTimeout(3000);
  await page.screenshot({ path: out });
  await browser.close();
})();
