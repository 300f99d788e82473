// /metrics and /readyz against a real cabind: the text passes Debian's promtool, its counters
// move as sessions are made, used and ended, and a real Prometheus scrapes it with the API key.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { Cdp, freePort, removeTree, useCabind, waitFor } from './helpers.mjs';

const ctx = useCabind();

async function scrape() {
  const r = await ctx.server.api('GET', '/metrics');
  assert.equal(r.status, 200, r.text);
  return r.text;
}

// The value of one sample (`name{labels}`, labels as written), or 0 when it is not there.
function sample(text, series) {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return 0;
}

test('/readyz is public and says whether creates are taken; /metrics needs the key', async () => {
  const ready = await fetch(`${ctx.server.base}/readyz`);
  assert.equal(ready.status, 200);
  assert.deepEqual(await ready.json(), { status: 'ready' });
  const anon = await ctx.server.api('GET', '/metrics', undefined, { key: null });
  assert.equal(anon.status, 401);
  const r = await fetch(`${ctx.server.base}/metrics`, { headers: { authorization: `Bearer ${ctx.server.key}` } });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
});

test('the counters move as sessions are made, used and ended, and promtool accepts the text', async () => {
  const before = await scrape();
  const s = await ctx.server.createSession({});
  const cdp = await Cdp.connect(s.cdp_url);
  await cdp.send('Browser.getVersion');
  const bad = await ctx.server.api('GET', `/v1/sessions/${s.id}/live/status?token=forged`, undefined,
                                   { key: null });
  assert.equal(bad.status, 401);
  let now = await scrape();
  const creates = 'cabin_session_creates_total{driver="namespace",outcome="ready"}';
  assert.equal(sample(now, creates), sample(before, creates) + 1);
  assert.equal(sample(now, 'cabin_sessions{state="running",driver="namespace"}'), 1);
  assert.equal(sample(now, 'cabin_connections{kind="cdp"}'), 1);
  assert.ok(sample(now, 'cabin_session_create_seconds_count{driver="namespace"}') >= 1);
  const refused = 'cabin_token_refusals_total{reason="invalid_token"}';
  assert.equal(sample(now, refused), sample(before, refused) + 1);
  assert.doesNotMatch(now, new RegExp(s.id), 'no session id in any label');

  cdp.ws.close();
  await cdp.closed;
  assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  const ended = 'cabin_session_ends_total{reason="deleted"}';
  now = await waitFor(async () => {
    const t = await scrape();
    return sample(t, 'cabin_connections{kind="cdp"}') === 0 && t;
  }, { what: 'the CDP connection to be counted closed' });
  assert.equal(sample(now, ended), sample(before, ended) + 1);
  assert.equal(sample(now, 'cabin_sessions{state="running",driver="namespace"}'), 0);

  const check = spawnSync('promtool', ['check', 'metrics'], { input: now, encoding: 'utf8' });
  assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`);
});

test('a real Prometheus scrapes cabind with the API key', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-prom-'));
  const port = await freePort();
  fs.writeFileSync(path.join(dir, 'key'), ctx.server.key);
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), [
    'global: {scrape_interval: 1s, scrape_timeout: 1s}',
    'scrape_configs:',
    '  - job_name: cabin',
    `    authorization: {type: Bearer, credentials_file: ${path.join(dir, 'key')}}`,
    `    static_configs: [{targets: ["127.0.0.1:${ctx.server.port}"]}]`,
  ].join('\n') + '\n');
  const prom = spawn('prometheus', [`--config.file=${path.join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  const log = [];
  prom.stderr.on('data', (d) => log.push(d.toString()));
  try {
    const query = async (q) => {
      const r = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(q)}`);
      return r.ok ? (await r.json()).data.result : [];
    };
    const up = await waitFor(async () => {
      const r = await query('up{job="cabin"}').catch(() => []);
      return r.length === 1 && r[0].value[1] === '1' && r;
    }, { timeoutMs: 30000, intervalMs: 250, what: `Prometheus to scrape cabind\n${log.join('')}` });
    assert.equal(up[0].metric.instance, `127.0.0.1:${ctx.server.port}`);
    const creates = await waitFor(async () => {
      const r = await query('cabin_session_creates_total');
      return r.length > 0 && r;
    }, { timeoutMs: 10000, what: 'the creates counter in Prometheus' });
    assert.ok(creates.some((c) => c.metric.outcome === 'ready' && Number(c.value[1]) >= 1));
  } finally {
    prom.kill('SIGTERM');
    await new Promise((r) => prom.once('exit', r));
    await removeTree(dir);
  }
});
