// Scale-out on one machine: three cabind nodes and two cabin-gateways on their own loopback
// addresses, the nodes found through a name server that answers a headless Service's records
// the way cluster DNS does. Everything a client does goes through a gateway.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';

import {
  api, freePort, removeServerDirs, removeTree, startCabind, waitFor, wsOpen,
} from './helpers.mjs';
import { hostRequest } from './preview_helpers.mjs';
import { SERVICE, startDns, startGateway } from './scale_helpers.mjs';

const NODES = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];
const GATEWAYS = ['127.0.0.5', '127.0.0.6'];
const ID_RE = /^ses_(n[234])_[a-z0-9]{20}$/;

describe('three nodes behind two gateways', () => {
  const key = randomBytes(16).toString('hex');
  let keyDir, dns, nodePort, gwPort;
  const nodes = {};  // node id -> server
  const gateways = [];
  const sessions = {};  // node id -> session created through the first gateway

  const startNode = (ip, dirs = {}) => startCabind({
    key, listen: `${ip}:${nodePort}`, ...dirs,
    args: ['--node-id', `n${ip.split('.')[3]}`, '--token-key-dir', keyDir, '--max-sessions', '4',
           '--public-url', `http://${GATEWAYS[0]}:${gwPort}`, '--preview-domain', 'preview.test',
           '--on-shutdown', 'keep'],
  });
  // A URL a node handed out, through the second gateway instead.
  const viaSecond = (url) => url.replace(`${GATEWAYS[0]}:${gwPort}`, new URL(gateways[1].base).host);

  before(async () => {
    keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-keys-'));
    fs.writeFileSync(path.join(keyDir, 'token-k0000000001.key'), randomBytes(32).toString('hex'));
    nodePort = await freePort();
    gwPort = await freePort();
    dns = await startDns(NODES);
    for (const ip of NODES) nodes[`n${ip.split('.')[3]}`] = await startNode(ip);
    gateways.push(await startGateway(GATEWAYS[0], gwPort, { dnsPort: dns.port, nodePort, key }));
    gateways.push(await startGateway(GATEWAYS[1], 0, { dnsPort: dns.port, nodePort, key }));
    for (const g of gateways) {
      await waitFor(async () => (await (await fetch(`${g.base}/readyz`)).json()).nodes_up === 3,
                    { timeoutMs: 10000, what: 'the gateway to find all three nodes' });
    }
  });
  after(async () => {
    for (const g of gateways) await g.stop();
    for (const n of Object.values(nodes)) {
      // Sessions left running by --on-shutdown keep end with their node here.
      const list = await n.api('GET', '/v1/sessions').catch(() => null);
      for (const s of list?.json?.sessions ?? []) await n.api('DELETE', `/v1/sessions/${s.id}`);
      await n.stop();
      await removeServerDirs(n);
    }
    dns?.close();
    await removeTree(keyDir);
  });

  test('creates spread over the nodes, and each session is reached through either gateway', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await gateways[0].api('POST', '/v1/sessions', {});
      assert.equal(r.status, 201, r.text + gateways[0].logTail());
      const node = ID_RE.exec(r.json.id)?.[1];
      assert.ok(node, r.json.id);
      assert.equal(sessions[node], undefined, `two creates on ${node}: placement ignored the room`);
      sessions[node] = r.json;
      assert.ok(r.json.cdp_url.startsWith(`ws://${GATEWAYS[0]}:${gwPort}/`), r.json.cdp_url);
    }
    // The list is every node's, merged, through either gateway.
    for (const g of gateways) {
      const list = await g.api('GET', '/v1/sessions');
      assert.equal(list.status, 200, list.text);
      assert.deepEqual(list.json.sessions.map((s) => s.id).sort(),
                       Object.values(sessions).map((s) => s.id).sort());
    }
    for (const [node, s] of Object.entries(sessions)) {
      // Playwright through the first gateway, Puppeteer through the second.
      const browser = await chromium.connectOverCDP(s.cdp_url);
      const page = browser.contexts()[0].pages()[0];
      await page.setContent(`<title>${node}</title>`);
      assert.equal(await page.title(), node);
      await browser.close();
      const pup = await puppeteer.connect({ browserWSEndpoint: viaSecond(s.cdp_url) });
      const titles = await Promise.all((await pup.pages()).map((p) => p.title()));
      assert.ok(titles.includes(node), JSON.stringify(titles));
      await pup.disconnect();

      const exec = await gateways[1].api('POST', `/v1/sessions/${s.id}/exec`,
                                         { argv: ['sh', '-c', 'echo $((6*7))'] });
      assert.equal(exec.status, 200, exec.text);
      assert.equal(exec.json.stdout.trim(), '42');
      const shot = await fetch(`${gateways[1].base}/v1/sessions/${s.id}/screenshot`,
                               { headers: { authorization: `Bearer ${key}` } });
      assert.equal(shot.status, 200);
      assert.equal(shot.headers.get('content-type'), 'image/png');
      assert.ok((await shot.arrayBuffer()).byteLength > 1000);
      // The live view's page and the VNC WebSocket under it.
      const live = await fetch(viaSecond(s.live_view_url));
      assert.equal(live.status, 200);
      let gotFirst;
      const first = new Promise((resolve) => { gotFirst = resolve; });
      const vnc = await wsOpen(viaSecond(s.vnc_url), { onMessage: (m) => gotFirst(m) });
      assert.match(Buffer.from(await first).toString('latin1'), /^RFB 003\.00\d\n/);
      vnc.close();
      // A frame stream: its hello, then a first frame.
      let gotFrame;
      const frame = new Promise((resolve) => { gotFrame = resolve; });
      const frames = await wsOpen(
        `${gateways[1].base.replace('http', 'ws')}/v1/sessions/${s.id}/frames?format=png&fps=5`,
        { headers: { authorization: `Bearer ${key}` }, onMessage: (m, binary) => binary && gotFrame(m) });
      assert.equal(Buffer.from(await frame).subarray(1, 4).toString('latin1'), 'PNG');
      frames.close();
      // Its own node answers for it, through either gateway; the others do not have it.
      const info = await gateways[1].api('GET', `/v1/sessions/${s.id}`);
      assert.equal(info.status, 200, info.text);
      for (const [other, n] of Object.entries(nodes)) {
        if (other !== node) assert.equal((await n.api('GET', `/v1/sessions/${s.id}`)).status, 404);
      }
    }
  });

  test('previews, by path and by host, reach the node that holds them', async () => {
    const s = sessions.n3;
    const started = await gateways[0].api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sh', '-c', 'cd /tmp && echo "hello from n3" > hello.txt && ' +
                         '(setsid python3 -m http.server 8001 --bind 127.0.0.1 > /dev/null 2>&1 < /dev/null &)'],
    });
    assert.equal(started.json.exit_code, 0, started.text);
    const p = await gateways[0].api('POST', `/v1/sessions/${s.id}/previews`, { port: 8001 });
    assert.equal(p.status, 201, p.text);
    assert.match(p.json.id, /^prv_n3_[a-z0-9]{20}$/);
    // Path-based: the token becomes a cookie, which later requests carry.
    const first = await fetch(viaSecond(p.json.path_url), { redirect: 'manual' });
    assert.equal(first.status, 302, await first.text());
    const cookie = first.headers.get('set-cookie').split(';')[0];
    const hello = await waitFor(async () => {
      const r = await fetch(`${gateways[1].base}/preview/${p.json.id}/hello.txt`, { headers: { cookie } });
      return r.status === 200 && await r.text();
    }, { timeoutMs: 20000, intervalMs: 250, what: 'the app behind the path-based preview' });
    assert.equal(hello, 'hello from n3\n');
    // Host-based: the gateway reads the node from the host name.
    const hostUrl = new URL(p.json.host_url);
    assert.match(hostUrl.hostname, /^p-8001-n3-[a-z0-9]{20}\.preview\.test$/);
    const gw = new URL(gateways[1].base);
    const viaHost = (target, headers = {}) =>
      hostRequest(Number(gw.port), hostUrl.hostname, target, headers, { address: gw.hostname });
    const opened = await viaHost(hostUrl.pathname + hostUrl.search);
    assert.equal(opened.status, 302, opened.body);
    const hostCookie = opened.headers['set-cookie'][0].split(';')[0];
    const got = await viaHost('/hello.txt', { cookie: hostCookie });
    assert.equal(got.status, 200, got.body);
    assert.equal(got.body, 'hello from n3\n');
  });

  test('MCP through a gateway reaches the session\'s node; its list is every node\'s', async () => {
    const call = async (name, args) => {
      const r = await gateways[1].api('POST', '/mcp', {
        jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args },
      }, { headers: { accept: 'application/json, text/event-stream' }, unchecked: true });
      assert.equal(r.status, 200, r.text);
      assert.ok(r.json.result, r.text);
      return r.json.result;
    };
    const listed = await call('session_list', {});
    assert.ok(!listed.isError, JSON.stringify(listed));
    assert.equal(listed.structuredContent.sessions.length, 3);
    for (const [node, s] of Object.entries(sessions)) {
      const got = await call('exec', { session_id: s.id, argv: ['true'] });
      assert.ok(!got.isError, JSON.stringify(got));
      assert.equal(got.structuredContent.exit_code, 0, JSON.stringify(got));
      const other = Object.values(nodes).find((n) => !n.hostPort.startsWith(`127.0.0.${node.slice(1)}:`));
      // The same call at another node directly: it does not hold the session.
      const there = await api(other.base, key, 'POST', '/mcp', {
        jsonrpc: '2.0', id: 2, method: 'tools/call',
        params: { name: 'exec', arguments: { session_id: s.id, argv: ['true'] } },
      }, { headers: { accept: 'application/json, text/event-stream' }, unchecked: true });
      assert.equal(there.json.result.isError, true, there.text);
    }
  });

  test('an Idempotency-Key retried through either gateway makes one session', async () => {
    const headers = { 'idempotency-key': `retry-${randomBytes(6).toString('hex')}` };
    const a = await gateways[0].api('POST', '/v1/sessions', {}, { headers });
    assert.equal(a.status, 201, a.text);
    const b = await gateways[1].api('POST', '/v1/sessions', {}, { headers });
    assert.ok([200, 201].includes(b.status), b.text);
    assert.equal(b.json.id, a.json.id);
    assert.equal((await gateways[1].api('DELETE', `/v1/sessions/${a.json.id}`)).status, 200);
  });

  test('a node that dies: placement avoids it, its sessions are unavailable, then back', async () => {
    const dead = nodes.n3;
    const s = sessions.n3;
    await dead.crash();
    const began = Date.now();
    await waitFor(async () => (await (await fetch(`${gateways[0].base}/readyz`)).json()).nodes_up === 2,
                  { timeoutMs: 5000, what: 'the gateway to see the node gone' });
    assert.ok(Date.now() - began < 5000);
    for (const g of gateways) {
      const r = await g.api('GET', `/v1/sessions/${s.id}`);
      assert.equal(r.status, 503, r.text);
      assert.equal(r.json.error.code, 'node_unavailable');
      assert.ok(Number(r.headers.get('retry-after')) > 0);
    }
    // The others are untouched, and take the creates.
    for (const node of ['n2', 'n4']) {
      assert.equal((await gateways[1].api('GET', `/v1/sessions/${sessions[node].id}`)).json.status,
                   'running');
    }
    const c = await gateways[0].api('POST', '/v1/sessions', {});
    assert.equal(c.status, 201, c.text);
    assert.notEqual(ID_RE.exec(c.json.id)[1], 'n3');
    const list = await gateways[0].api('GET', '/v1/sessions');
    assert.equal(list.status, 200);
    assert.match(list.headers.get('cabin-unavailable-nodes'), /n3/);
    assert.equal((await gateways[0].api('DELETE', `/v1/sessions/${c.json.id}`)).status, 200);

    // Restarted on its state: it adopts the sandbox, and the same URLs work again.
    nodes.n3 = await startNode('127.0.0.3', { stateDir: dead.stateDir, runDir: dead.runDir });
    // Each gateway finds it at its own next poll.
    for (const g of gateways) {
      await waitFor(async () => (await g.api('GET', `/v1/sessions/${s.id}`)).status === 200,
                    { timeoutMs: 15000, what: 'the node back behind each gateway' });
    }
    assert.equal((await gateways[1].api('GET', `/v1/sessions/${s.id}`)).json.status, 'running');
    const browser = await chromium.connectOverCDP(s.cdp_url);
    assert.equal(await browser.contexts()[0].pages()[0].evaluate(() => 6 * 7), 42);
    await browser.close();
  });
});

describe('two nodes of sim sessions behind a gateway', () => {
  const key = randomBytes(16).toString('hex');
  const nodes = [];
  let gateway, keysDir;
  // A tenant key both nodes take from one file, as from a shared Secret.
  const tenantId = `key_${randomBytes(10).toString('hex')}`;
  const tenantSecret = randomBytes(32).toString('hex');
  const tenantKey = `cabin_${tenantId}.${tenantSecret}`;
  before(async () => {
    keysDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-tenants-'));
    const keysFile = path.join(keysDir, 'tenants.json');
    fs.writeFileSync(keysFile, JSON.stringify({ keys: [{
      id: tenantId, name: 'team', max_sessions: 3,
      secret_sha256: createHash('sha256').update(tenantSecret).digest('hex'),
    }] }));
    const port = await freePort();
    for (const ip of ['127.0.0.7', '127.0.0.8']) {
      nodes.push(await startCabind({
        key, listen: `${ip}:${port}`,
        args: ['--node-id', `s${ip.split('.')[3]}`, '--sim-driver', '--default-driver', 'sim',
               '--max-sessions', '200', '--default-idle-timeout-s', '0',
               '--tenant-keys-file', keysFile],
      }));
    }
    gateway = await startGateway('127.0.0.9', 0, { nodes: nodes.map((n) => n.hostPort), key });
    await waitFor(async () => (await (await fetch(`${gateway.base}/readyz`)).json()).nodes_up === 2,
                  { timeoutMs: 10000, what: 'the gateway to find both nodes' });
  });
  after(async () => {
    await gateway?.stop();
    for (const n of nodes) await n.stop();
    await removeTree(keysDir);
  });

  test('a tenant key of the shared file works on every node, and its quota holds across them', async () => {
    const made = [];
    for (let i = 0; i < 3; i++) {
      const r = await gateway.api('POST', '/v1/sessions', {}, { key: tenantKey });
      assert.equal(r.status, 201, r.text);
      made.push(r.json.id);
    }
    // Placement spread them: each node alone is under the quota of 3.
    assert.equal(new Set(made.map((id) => id.split('_')[1])).size, 2, JSON.stringify(made));
    const over = await gateway.api('POST', '/v1/sessions', {}, { key: tenantKey });
    assert.equal(over.status, 429, over.text);
    assert.equal(over.json.error.code, 'quota_sessions');
    assert.ok(Number(over.headers.get('retry-after')) > 0);
    // The key reads its own sessions through the gateway, wherever they are.
    const list = await gateway.api('GET', '/v1/sessions', undefined, { key: tenantKey });
    assert.deepEqual(list.json.sessions.map((x) => x.id).sort(), [...made].sort());
    // A file's key is the file's to remove.
    const del = await nodes[0].api('DELETE', `/v1/keys/${tenantId}`);
    assert.equal(del.status, 409, del.text);
    assert.equal(del.json.error.code, 'key_in_file');
    for (const id of made) assert.equal((await gateway.api('DELETE', `/v1/sessions/${id}`)).status, 200);
    const again = await gateway.api('POST', '/v1/sessions', {}, { key: tenantKey });
    assert.equal(again.status, 201, again.text);
    assert.equal((await gateway.api('DELETE', `/v1/sessions/${again.json.id}`)).status, 200);
  });

  test('a list of every node\'s sessions comes newest first; reads keep their connection', async () => {
    const made = [];
    for (let i = 0; i < 120; i++) {
      const r = await gateway.api('POST', '/v1/sessions', {});
      assert.equal(r.status, 201, r.text);
      made.push(r.json.id);
    }
    const nodeOf = (id) => id.split('_')[1];
    const perNode = made.reduce((m, id) => m.set(nodeOf(id), (m.get(nodeOf(id)) ?? 0) + 1), new Map());
    assert.deepEqual([...perNode.values()], [60, 60], JSON.stringify([...perNode]));
    const list = await gateway.api('GET', '/v1/sessions');
    assert.equal(list.status, 200);
    const ids = list.json.sessions.map((s) => s.id);
    assert.deepEqual([...ids].sort(), [...made].sort());
    const times = list.json.sessions.map((s) => s.created_at);
    assert.deepEqual(times, [...times].sort().reverse());

    // One keep-alive client connection carries every read, to either node.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const ports = new Set();
    const u = new URL(gateway.base);
    for (const id of made.slice(0, 20)) {
      const status = await new Promise((resolve, reject) => {
        const req = http.get({ host: u.hostname, port: u.port, path: `/v1/sessions/${id}`, agent,
                               headers: { authorization: `Bearer ${key}` } }, (res) => {
          ports.add(req.socket.localPort);
          res.resume();
          res.on('end', () => resolve(res.statusCode));
        });
        req.on('error', reject);
      });
      assert.equal(status, 200);
    }
    agent.destroy();
    assert.equal(ports.size, 1, `${ports.size} connections for 20 reads`);
  });

  test('an upload that waits for 100-continue gets it from the gateway, and the connection goes on', async () => {
    const made = await gateway.api('POST', '/v1/sessions', {});
    assert.equal(made.status, 201, made.text);
    const u = new URL(gateway.base);
    const socket = net.connect(Number(u.port), u.hostname);
    await once(socket, 'connect');
    let got = '';
    socket.on('data', (d) => { got += d.toString('latin1'); });
    const until = (re) => waitFor(() => re.test(got), { timeoutMs: 10000, what: String(re) });
    const body = JSON.stringify({ argv: ['echo', 'hi'] });
    socket.write(`POST /v1/sessions/${made.json.id}/exec HTTP/1.1\r\nHost: ${u.host}\r\n` +
                 `Authorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
                 `Content-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`);
    await until(/^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    socket.write(body);
    await until(/"stdout":"echo hi"/);
    assert.match(got, /HTTP\/1\.1 200 OK/);
    // The same connection carries the next request, and its answer is its own.
    got = '';
    socket.write(`GET /v1/sessions/${made.json.id} HTTP/1.1\r\nHost: ${u.host}\r\n` +
                 `Authorization: Bearer ${key}\r\n\r\n`);
    await until(new RegExp(`"id":"${made.json.id}"`));
    assert.match(got, /^HTTP\/1\.1 200 OK\r\n/);
    socket.destroy();
    assert.equal((await gateway.api('DELETE', `/v1/sessions/${made.json.id}`)).status, 200);
  });

  test('SIGTERM: the gateway takes no new connection and exits without waiting for idle ones', async () => {
    const agent = new http.Agent({ keepAlive: true });
    const u = new URL(gateway.base);
    const status = await new Promise((resolve, reject) => {
      // Routed to a node: the connection stays open after the answer.
      http.get({ host: u.hostname, port: u.port, path: '/v1/info', agent,
                 headers: { authorization: `Bearer ${key}` } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      }).on('error', reject);
    });
    assert.equal(status, 200);
    const began = Date.now();
    gateway.child.kill('SIGTERM');
    await once(gateway.child, 'exit');
    assert.ok(Date.now() - began < 5000, `${Date.now() - began} ms to exit`);
    agent.destroy();
    await assert.rejects(fetch(`${gateway.base}/healthz`));
  });
});
