// The console and the live view at window widths from a phone's to a wide screen's, in a real
// headless Chromium against real sessions: nothing reaches past the window's right edge, every
// action of a session can be reached (directly or through its keyboard-driven "More" menu), a
// still screen's thumbnail shows the picture, Chromium's known log noise is hidden but counted,
// a view link says it is view-only, and a live view whose session ends says so and why.
// Screenshots of each width go to $CABIN_TEST_ARTIFACTS/webui (default build/test-artifacts/webui).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { pixelAt, pngDecode, useCabind, waitFor } from './helpers.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const ARTIFACTS = path.join(process.env.CABIN_TEST_ARTIFACTS ||
                            path.join(ROOT, 'build', 'test-artifacts'), 'webui');
const WIDTHS = [360, 760, 1280, 1920, 2560];
// The still page in the sandbox: one flat colour, so a picture of it is easy to recognise.
const COLOUR = [230, 120, 20];
const STILL_PAGE = `<!doctype html><title>still</title>
<body style="margin:0;background:rgb(${COLOUR.join(',')})"></body>`;
const RUNNING_ACTIONS = ['live-link', 'control-link', 'logs', 'copy-id', 'copy-cdp', 'copy-live',
                         'copy-vnc', 'delete'];
const ENDED_ACTIONS = ['logs', 'copy-id'];

const ctx = useCabind();
const near = (a, b, tol = 24) => a.every((v, i) => Math.abs(v - b[i]) <= tol);

// What on the page reaches past the window's edges: the document's scroll width, and every
// element's box (hidden ones have none).
function overflow(page) {
  return page.evaluate(() => {
    const w = window.innerWidth;
    const out = [];
    const sw = document.documentElement.scrollWidth;
    if (sw > w) out.push(`the document is ${sw} px wide`);
    for (const el of document.querySelectorAll('body *')) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (r.right > w + 0.5 || r.left < -0.5) {
        const cls = typeof el.className === 'string' ? el.className.trim() : '';
        const name = el.tagName.toLowerCase() + (el.id ? `#${el.id}` : '') +
                     (cls ? `.${cls.replace(/\s+/g, '.')}` : '');
        out.push(`${name} spans ${Math.round(r.left)}..${Math.round(r.right)}`);
      }
    }
    return out;
  });
}

async function assertFits(page, what) {
  const bad = await overflow(page);
  const width = await page.evaluate(() => window.innerWidth);
  assert.deepEqual(bad, [], `${what}: wider than the window (${width} px)`);
}

// The actions of a row a person can reach: those shown, and those in its menu, opened and
// walked with the keyboard. The menu closes again with Escape, giving focus back to its button.
async function reachableActions(page, row) {
  const inView = (el) => el.evaluate((e) => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth;
  });
  const found = [];
  for (const el of await page.$$(`${row} .action-list > :not(.menu)`)) {
    if (await el.isVisible() && await inView(el)) found.push(await el.getAttribute('class'));
  }
  const button = page.locator(`${row} .menu-button`);
  await button.focus();
  await page.keyboard.press('Enter');
  await page.waitForSelector(`${row} .menu-list`, { state: 'visible' });
  assert.equal(await button.getAttribute('aria-expanded'), 'true');
  const items = await page.$$(`${row} .menu-list [role=menuitem]`);
  for (let i = 0; i < items.length; i++) {
    // Each item takes the focus in turn, as the arrow keys move down the menu.
    assert.equal(await items[i].evaluate((e) => e === document.activeElement), true,
                 `item ${i} of the menu has the focus`);
    if (await items[i].isVisible() && await inView(items[i])) {
      found.push(await items[i].getAttribute('class'));
    }
    await page.keyboard.press('ArrowDown');
  }
  await assertFits(page, `${row} with its menu open`);
  await page.keyboard.press('Escape');
  await page.waitForSelector(`${row} .menu-list`, { state: 'hidden' });
  assert.equal(await button.evaluate((e) => e === document.activeElement), true,
               'Escape gives the focus back to the menu button');
  return found.flatMap((c) => c.split(/\s+/));
}

describe('the web UI at every width', () => {
  let running, ended, browser, sandbox;
  before(async () => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    running = await ctx.server.createSession({ resolution: { width: 1024, height: 640 } });
    ended = await ctx.server.createSession({ resolution: { width: 800, height: 600 } });
    await ctx.server.deleteSession(ended.id);
    sandbox = await chromium.connectOverCDP(running.cdp_url);
    await sandbox.contexts()[0].pages()[0].setContent(STILL_PAGE);
    // The page is on the screen (and stays as it is from now on).
    await waitFor(async () => {
      const res = await fetch(`${ctx.server.base}/v1/sessions/${running.id}/screenshot`,
                              { headers: { authorization: `Bearer ${ctx.server.key}` } });
      return near(pixelAt(pngDecode(Buffer.from(await res.arrayBuffer())), 512, 500), COLOUR, 4);
    }, { what: 'the still page on the screen', timeoutMs: 15000 });
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
                                      args: ['--no-first-run', '--disable-background-networking',
                                             '--disable-component-update', '--disable-sync'] });
  });
  after(async () => {
    await sandbox?.close();
    await browser?.close();
  });

  // A console page, signed in, listing ended sessions too.
  const consolePage = async (width) => {
    const page = await browser.newPage({ viewport: { width, height: 900 } });
    await page.addInitScript((key) => sessionStorage.setItem('cabin.apiKey', key), ctx.server.key);
    await page.goto(ctx.server.base + '/');
    await page.waitForSelector('#sessions-panel', { state: 'visible' });
    await page.check('#show-ended');
    await page.waitForSelector(`tr[data-id="${ended.id}"]`);
    await page.waitForSelector(`tr[data-id="${running.id}"]`);
    return page;
  };

  for (const width of WIDTHS) {
    test(`${width} px: the console and the live view fit, and every action is there`, async () => {
      const page = await consolePage(width);
      const run = `tr[data-id="${running.id}"]`;
      const end = `tr[data-id="${ended.id}"]`;
      // The driver menu is as narrow as its short labels; the details are in a hint.
      const select = await page.$eval('#create-driver', (s) => s.getBoundingClientRect().width);
      assert.ok(select <= 320, `the driver menu is ${select} px wide`);
      assert.ok((await page.textContent('#driver-hint')).length > 0, 'the driver has a hint');
      // An ended session says so, and why.
      assert.equal(await page.textContent(`${end} td.status .badge`), 'ended');
      assert.equal(await page.textContent(`${end} td.status .reason`), 'deleted');
      assert.equal(await page.textContent(`${run} td.status .badge`), 'running');
      await assertFits(page, 'the console');

      const runActions = await reachableActions(page, run);
      for (const a of RUNNING_ACTIONS) assert.ok(runActions.includes(a), `${a} in ${runActions}`);
      const endActions = await reachableActions(page, end);
      for (const a of ENDED_ACTIONS) assert.ok(endActions.includes(a), `${a} in ${endActions}`);

      await page.click(`${run} button.logs`);
      await page.waitForSelector('#logs-body span');
      await assertFits(page, 'the console with logs');
      await page.screenshot({ path: path.join(ARTIFACTS, `console-${width}.png`), fullPage: true });
      await page.click(`${run} .menu-button`);
      await page.screenshot({ path: path.join(ARTIFACTS, `console-${width}-menu.png`) });
      await page.close();

      // The session's own live_view_url only watches, and says so.
      const live = await browser.newPage({ viewport: { width, height: Math.round(width * 0.6) } });
      await live.goto(running.live_view_url);
      await live.waitForSelector('#conn-state[data-state=connected]', { timeout: 20000 });
      assert.equal(await live.textContent('#access'), 'View only');
      assert.equal(await live.isVisible('#access'), true);
      assert.equal(await live.isVisible('#control-toggle'), false);
      await assertFits(live, 'the live view');
      await live.screenshot({ path: path.join(ARTIFACTS, `live-${width}.png`) });
      await live.close();
    });
  }

  test('the logs hide Chromium\'s known noise, count it, and show it on request', async () => {
    const page = await consolePage(1280);
    await page.click(`tr[data-id="${running.id}"] button.logs`);
    await page.waitForSelector('#logs-body span');
    const api = (await ctx.server.api('GET', `/v1/sessions/${running.id}/logs`)).json.lines;
    const noisy = api.filter((l) => /:ERROR:dbus\//.test(l)).length;
    assert.ok(noisy > 0, 'a sandbox without D-Bus makes Chromium complain');
    const counted = Number(await page.textContent('#logs-noise-count'));
    assert.ok(counted >= noisy, `${counted} hidden, ${noisy} D-Bus lines`);
    assert.equal(await page.isVisible('#logs-noise-toggle'), true);
    const shown = () => page.$$eval('#logs-body span', (ss) => ss.filter((s) =>
      s.getClientRects().length > 0).map((s) => s.textContent));
    const before = await shown();
    assert.ok(before.some((l) => /\[agent/.test(l)), 'cabin-agent\'s lines show');
    assert.ok(!before.some((l) => /dbus\//.test(l)), 'no D-Bus noise shows');
    await page.check('#logs-noise');
    await waitFor(async () => (await shown()).some((l) => /dbus\//.test(l)),
                  { what: 'the noise to show' });
    // Nothing is left out: every line the API has is on the page.
    const all = await page.textContent('#logs-body');
    for (const l of api.slice(0, 20)) assert.ok(all.includes(l), l);
    await page.close();
  });

  test('a still screen\'s thumbnail shows its picture', async () => {
    const page = await consolePage(1280);
    const thumb = `tr[data-id="${running.id}"] td.thumb img`;
    const colour = () => page.$eval(thumb, (img) => {
      if (!img.naturalWidth) return null;
      const c = document.createElement('canvas');
      c.width = img.naturalWidth;
      c.height = img.naturalHeight;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      return [...g.getImageData(c.width >> 1, c.height - 4, 1, 1).data.slice(0, 3)];
    });
    let last;
    await waitFor(async () => (last = await colour()) && near(last, COLOUR),
                  { what: `the thumbnail to show rgb(${COLOUR})`, timeoutMs: 15000 })
      .catch((e) => assert.fail(`${e.message}; it shows ${JSON.stringify(last)}`));
    await page.close();
  });

  test('a live view whose session ends says it ended, and why', async () => {
    const s = await ctx.server.createSession({ resolution: { width: 800, height: 600 } });
    const page = await browser.newPage({ viewport: { width: 760, height: 560 } });
    await page.goto(s.live_view_url);
    await page.waitForSelector('#conn-state[data-state=connected]', { timeout: 20000 });
    await ctx.server.deleteSession(s.id);
    await page.waitForSelector('#conn-state[data-state=ended]', { timeout: 15000 });
    assert.equal(await page.textContent('#conn-state'), 'Ended');
    assert.equal(await page.isVisible('#notice'), true);
    assert.equal(await page.textContent('#notice-title'), 'This session has ended.');
    assert.match(await page.textContent('#notice-detail'), /^Reason: deleted\b/);
    assert.equal(await page.isEnabled('#screenshot'), false);
    assert.equal(await page.isVisible('#access'), false);
    await assertFits(page, 'the ended live view');
    await page.screenshot({ path: path.join(ARTIFACTS, 'live-ended.png') });
    await page.close();
  });
});
