// What the restart tests leave in a session before cabind goes, and read back after the next
// cabind adopted it.
import assert from 'node:assert/strict';

import { chromium } from 'playwright-core';

// A URL cabind handed out, on the listener of `server` (a restarted cabind has a new port here;
// in a deployment the address stays the same).
export function on(server, url) {
  const u = new URL(url);
  u.host = server.hostPort;
  return u.toString();
}

// A page with a title, a JavaScript object and a cookie.
export async function markPage(cdpUrl) {
  const pw = await chromium.connectOverCDP(cdpUrl, { timeout: 20000 });
  try {
    const context = pw.contexts()[0];
    const page = context.pages()[0] ?? (await context.newPage());
    await page.setContent('<title>before restart</title><p id=n>0</p>');
    await page.evaluate(() => {
      window.kept = { counter: 41 };
    });
    await context.addCookies([{ name: 'who', value: 'kept', url: 'https://example.test/' }]);
  } finally {
    await pw.close();
  }
}

export async function readPage(cdpUrl) {
  const pw = await chromium.connectOverCDP(cdpUrl, { timeout: 20000 });
  try {
    const context = pw.contexts()[0];
    let page;
    for (const p of context.pages()) {
      if ((await p.title()) === 'before restart') page = p;
    }
    assert.ok(page, 'the page is still there');
    return {
      title: await page.title(),
      counter: await page.evaluate(() => (window.kept ? ++window.kept.counter : null)),
      cookies: (await context.cookies('https://example.test/')).map((c) => `${c.name}=${c.value}`),
    };
  } finally {
    await pw.close();
  }
}

// `expression`'s value in the page markPage made.
export async function inPage(cdpUrl, expression) {
  const pw = await chromium.connectOverCDP(cdpUrl, { timeout: 20000 });
  try {
    for (const p of pw.contexts()[0].pages()) {
      if ((await p.title()) === 'before restart') return await p.evaluate(expression);
    }
    throw new Error('the page is gone');
  } finally {
    await pw.close();
  }
}
