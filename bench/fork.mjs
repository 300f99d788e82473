// Fork: a session logged in to a site (a cookie), with its cart in local storage and two pages
// open, forked into N sessions on the namespace driver, against what a Playwright user does by
// hand today: N cold sessions, each given the source's cookies (context.cookies() and
// addCookies()) and sent to its pages, and the cart written into each. Timed from the request
// until every child has its pages loaded; children are deleted before the next round. Reported:
// p50 and p95 over `rounds` for each N, in ms.
import http from 'node:http';

import { chromium } from 'playwright-core';

import { Cdp, startCabind, waitFor } from '../tests/integration/helpers.mjs';
import { summary } from './stats.mjs';

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function byHand(server, source, spec, n) {
  const t0 = process.hrtime.bigint();
  const from = await chromium.connectOverCDP(source.cdp_url);
  const context = from.contexts()[0];
  const cookies = await context.cookies();
  const pages = context.pages().map((p) => p.url());
  const cart = await context.pages()[0].evaluate(() => localStorage.getItem('cart'));
  await from.close();
  const children = await Promise.all(Array.from({ length: n }, () => server.createSession(spec)));
  await Promise.all(children.map(async (c) => {
    const b = await chromium.connectOverCDP(c.cdp_url);
    try {
      const ctx = b.contexts()[0];
      await ctx.addCookies(cookies);
      const first = ctx.pages()[0];
      await first.goto(pages[0]);
      await first.evaluate((v) => localStorage.setItem('cart', v), cart);
      for (const url of pages.slice(1)) await (await ctx.newPage()).goto(url);
    } finally {
      await b.close();
    }
  }));
  const took = ms(t0);
  for (const c of children) await server.deleteSession(c.id);
  return took;
}

async function forked(server, source, n) {
  const t0 = process.hrtime.bigint();
  const r = await server.api('POST', `/v1/sessions/${source.id}/fork`, { count: n });
  if (r.status !== 201) throw new Error(`fork: ${r.status} ${r.text}`);
  const took = ms(t0);
  for (const c of r.json.sessions) await server.deleteSession(c.id);
  return took;
}

export async function benchFork({ rounds = 5, counts = [1, 4], log = () => {} } = {}) {
  const site = http.createServer((req, res) => {
    res.setHeader('content-type', 'text/html');
    if (req.url === '/login') res.setHeader('set-cookie', 'sid=bench; Max-Age=86400; Path=/');
    res.end(`<title>${req.url}</title>`);
  });
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  const origin = `http://shop.test:${site.address().port}`;
  const server = await startCabind({
    args: ['--log-level', 'warn', '--egress-resolve', 'shop.test=127.0.0.1',
           '--egress-allow-host-cidr', '127.0.0.1/32'],
  });
  const spec = {
    network: { mode: 'allowlist', allow: [{ host: 'shop.test', ports: [site.address().port] }] },
  };
  const out = { rounds, counts: {} };
  try {
    const source = await server.createSession({ ...spec, start_url: `${origin}/login` });
    const cdp = await Cdp.connect(source.cdp_url);
    await cdp.send('Target.createTarget', { url: `${origin}/second` });
    await cdp.close();
    const b = await chromium.connectOverCDP(source.cdp_url);
    await b.contexts()[0].pages()[0].evaluate(() => localStorage.setItem('cart', '3 apples'));
    await b.close();
    await waitFor(async () => {
      const r = await server.api('POST', `/v1/sessions/${source.id}/exec`, {
        argv: ['sh', '-c', 'grep -rl "3 apples" "$HOME/chromium/Default/Local Storage" || true'],
      });
      return r.json.stdout.trim() !== '';
    }, { timeoutMs: 30000, intervalMs: 500, what: 'the cart on the source\'s disk' });
    for (const n of counts) {
      const fork = [];
      const hand = [];
      for (let r = 0; r < rounds; r++) {
        fork.push(await forked(server, source, n));
        hand.push(await byHand(server, source, spec, n));
        log(`fork: N=${n} round ${r + 1}/${rounds}`);
      }
      out.counts[n] = { fork: summary(fork), by_hand: summary(hand) };
    }
  } finally {
    await server.stop();
    site.close();
  }
  return out;
}

export function forkRows(r, fmt) {
  const rows = [];
  for (const [n, v] of Object.entries(r.counts)) {
    for (const p of ['p50', 'p95']) {
      rows.push([`fork into ${n} (cookies, storage, 2 pages), fork vs cold + Playwright copy, ${p} (ms)`,
                 fmt(v.fork[p], 0), fmt(v.by_hand[p], 0), `${fmt(v.fork[p] / v.by_hand[p], 2)}x`, '', '']);
    }
  }
  return rows;
}
