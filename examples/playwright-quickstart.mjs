// Playwright on a Cabin session: create one, connect over CDP, open a page, delete it.
//   CABIN_API_KEY=$(cat state/api-key) node examples/playwright-quickstart.mjs https://example.com
import { chromium } from 'playwright-core';

import { createSession, deleteSession } from './session.mjs';

const session = await createSession({ resolution: { width: 1280, height: 800 } });
try {
  const browser = await chromium.connectOverCDP(session.cdp_url);
  const page = browser.contexts()[0].pages()[0];
  await page.goto(process.argv[2] ?? 'data:text/html,<title>hello</title><h1>hello</h1>');
  console.log(JSON.stringify({ session: session.id, title: await page.title(),
                               h1: await page.textContent('h1') }));
  await browser.close();
} finally {
  await deleteSession(session.id);
}
