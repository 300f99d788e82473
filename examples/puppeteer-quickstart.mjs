// Puppeteer on a Cabin session: create one, connect to its CDP URL, open a page, delete it.
//   CABIN_API_KEY=$(cat state/api-key) node examples/puppeteer-quickstart.mjs https://example.com
import puppeteer from 'puppeteer-core';

import { createSession, deleteSession } from './session.mjs';

const session = await createSession({ resolution: { width: 1280, height: 800 } });
try {
  const browser = await puppeteer.connect({ browserWSEndpoint: session.cdp_url, defaultViewport: null });
  const [page] = await browser.pages();
  await page.goto(process.argv[2] ?? 'data:text/html,<title>hello</title><h1>hello</h1>');
  console.log(JSON.stringify({ session: session.id, title: await page.title(),
                               h1: await page.$eval('h1', (e) => e.textContent) }));
  await browser.disconnect();
} finally {
  await deleteSession(session.id);
}
