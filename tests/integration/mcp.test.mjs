// POST /mcp with the official MCP SDK client (Client + StreamableHTTPClientTransport): tools
// listed, a session created, a loopback page opened, seen in a screenshot and changed by a
// click, a command run, and each refusal as MCP clients expect it.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { api, pixelAt, pngDecode, startCabind, waitFor } from './helpers.mjs';
import { onPage } from './shop_site.mjs';

const W = 1024;
const H = 768;

// One page: blue, all button; a click turns it green and says so in its title.
const PAGE = `<!doctype html><title>ready</title>
<style>html,body{margin:0;height:100%;background:rgb(0,0,255)}
button{position:fixed;inset:0;width:100%;height:100%;border:0;background:transparent}</style>
<button onclick="document.body.style.background='rgb(0,255,0)';document.title='clicked'">go</button>`;

async function connect(server, { key = server.key, headers = {} } = {}) {
  const client = new Client({ name: 'cabin-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${server.base}/mcp`), {
    requestInit: { headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers } },
  });
  await client.connect(transport);
  return client;
}

// Sends one raw JSON-RPC message, as a client that is not the SDK would.
async function post(server, body, headers = {}) {
  const res = await fetch(`${server.base}/mcp`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${server.key}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text ? JSON.parse(text) : null };
}

describe('MCP', () => {
  let site, server, client, sessionId;
  const created = new Set();
  const network = () => ({
    mode: 'allowlist', allow: [{ host: 'app.test', ports: [site.address().port] }],
  });

  before(async () => {
    site = http.createServer((req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(PAGE);
    });
    await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
    server = await startCabind({
      args: ['--egress-resolve', 'app.test=127.0.0.1', '--egress-allow-host-cidr', '127.0.0.1/32'],
    });
    client = await connect(server);
  });
  after(async () => {
    await client?.close();
    for (const id of created) await server?.api('DELETE', `/v1/sessions/${id}`).catch(() => {});
    await server?.stop();
    site?.close();
  });

  test('the tools are listed, each with an object input schema', async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['computer', 'exec', 'file_list', 'file_read', 'file_write',
      'live_view_url', 'navigate', 'preview_open', 'screenshot', 'session_create',
      'session_delete', 'session_list']);
    for (const t of tools) assert.equal(t.inputSchema.type, 'object', t.name);
    const create = tools.find((t) => t.name === 'session_create');
    assert.ok(create.inputSchema.properties.resolution, 'session_create takes the create spec');
    assert.equal(client.getServerVersion().name, 'cabin');
  });

  test('session_create starts a session the API sees', async () => {
    const r = await client.callTool({
      name: 'session_create',
      arguments: { resolution: { width: W, height: H }, network: network() },
    });
    assert.equal(r.isError, false, JSON.stringify(r.content));
    sessionId = r.structuredContent.id;
    created.add(sessionId);
    assert.match(sessionId, /^ses_[a-z0-9]{20}$/);
    assert.equal(JSON.parse(r.content[0].text).id, sessionId);
    const got = await server.api('GET', `/v1/sessions/${sessionId}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.status, 'running');
    const list = await client.callTool({ name: 'session_list', arguments: {} });
    assert.ok(list.structuredContent.sessions.some((s) => s.id === sessionId));
  });

  test('navigate opens a loopback page; screenshot shows it at the declared size', async () => {
    const url = `http://app.test:${site.address().port}/`;
    const r = await client.callTool({ name: 'navigate', arguments: { session_id: sessionId, url } });
    assert.equal(r.isError, false, JSON.stringify(r.content));
    const s = (await server.api('GET', `/v1/sessions/${sessionId}`)).json;
    assert.equal((await onPage(s)).title, 'ready');

    // The load event can come a frame before the page is on the screen.
    let seen;
    await waitFor(async () => {
      const shot = await client.callTool({ name: 'screenshot', arguments: { session_id: sessionId } });
      assert.equal(shot.isError, false);
      assert.equal(shot.content[0].type, 'image');
      assert.equal(shot.content[0].mimeType, 'image/png');
      const img = pngDecode(Buffer.from(shot.content[0].data, 'base64'));
      assert.deepEqual([img.width, img.height], [W, H]);
      seen = pixelAt(img, W / 2, H - 40);
      return seen[2] > 200 && seen[0] < 50 && seen[1] < 50;
    }, { what: 'the page\'s blue on the screen' }).catch((err) => {
      throw new Error(`${err.message}: last seen ${seen}`);
    });
  });

  test('computer clicks the page, and the next screenshot shows the change', async () => {
    const r = await client.callTool({
      name: 'computer',
      arguments: { session_id: sessionId, actions: [
        { action: 'left_click', coordinate: [W / 2, H - 40] },
        { action: 'screenshot' },
      ] },
    });
    assert.equal(r.isError, false, JSON.stringify(r.content));
    assert.equal(r.content[0].type, 'text');
    assert.equal(r.content[1].type, 'image', 'the batch\'s screenshot comes back as an image');
    const s = (await server.api('GET', `/v1/sessions/${sessionId}`)).json;
    await waitFor(async () => (await onPage(s)).title === 'clicked', { what: 'the click' });
    let seen;
    await waitFor(async () => {
      const shot = await client.callTool({ name: 'screenshot', arguments: { session_id: sessionId } });
      seen = pixelAt(pngDecode(Buffer.from(shot.content[0].data, 'base64')), W / 2, H - 40);
      return seen[1] > 200 && seen[0] < 50 && seen[2] < 50;
    }, { what: 'green on the screen after the click' }).catch((err) => {
      throw new Error(`${err.message}: last seen ${seen}`);
    });
  });

  test('a fresh session: no warning bar; navigate fails as the page did, keys go to the page',
    async () => {
      const made = await client.callTool({
        name: 'session_create',
        arguments: { resolution: { width: W, height: H }, network: network() },
      });
      assert.equal(made.isError, false, JSON.stringify(made.content));
      const id = made.structuredContent.id;
      created.add(id);
      const s = (await server.api('GET', `/v1/sessions/${id}`)).json;
      // No bar between the toolbar and the page (Chromium's warning about a command-line flag
      // took 56 px more): the tab strip and the toolbar are all there is above the page.
      const { value: chrome } = await onPage(s, 'outerHeight - innerHeight');
      assert.ok(chrome > 40 && chrome <= 100, `${chrome} px above the page`);

      // Refused by the policy: an error with Chromium's words and the policy's reason.
      const refused = await client.callTool({
        name: 'navigate', arguments: { session_id: id, url: 'https://refused.test/' },
      });
      assert.equal(refused.isError, true, JSON.stringify(refused.content));
      const text = refused.content[0].text;
      assert.match(text, /navigation_failed/);
      assert.match(text, /ERR_TUNNEL_CONNECTION_FAILED/);
      assert.match(text, /egress refused refused\.test:443: no rule allows refused\.test:443/);

      // A page that loads, with a field that takes focus: typed keys reach it, not the omnibox.
      const form = 'data:text/html,<title>form</title><input id=i autofocus>';
      const went = await client.callTool({ name: 'navigate', arguments: { session_id: id, url: form } });
      assert.equal(went.isError, false, JSON.stringify(went.content));
      const typed = await client.callTool({
        name: 'computer', arguments: { session_id: id, actions: [{ action: 'type', text: 'abc' }] },
      });
      assert.equal(typed.isError, false, JSON.stringify(typed.content));
      const { title, value } = await onPage(s, 'document.getElementById("i").value');
      assert.equal(title, 'form');
      assert.equal(value, 'abc');
    });

  test('exec, preview_open and live_view_url answer what their endpoints do', async () => {
    const ex = await client.callTool({
      name: 'exec', arguments: { session_id: sessionId, argv: ['sh', '-c', 'echo hi; exit 3'] },
    });
    assert.equal(ex.isError, false, JSON.stringify(ex.content));
    assert.equal(ex.structuredContent.exit_code, 3);
    assert.equal(ex.structuredContent.stdout, 'hi\n');

    const pv = await client.callTool({ name: 'preview_open', arguments: { session_id: sessionId, port: 8000 } });
    assert.equal(pv.isError, false, JSON.stringify(pv.content));
    assert.match(pv.structuredContent.url, /cabin_token=/);

    const live = await client.callTool({ name: 'live_view_url', arguments: { session_id: sessionId } });
    assert.equal(live.isError, false, JSON.stringify(live.content));
    const page = await fetch(live.structuredContent.live_view_url);
    assert.equal(page.status, 200, 'the live view opens with the URL alone');
    const bad = await client.callTool({
      name: 'live_view_url', arguments: { session_id: sessionId, scope: 'cdp' },
    });
    assert.equal(bad.isError, true);
  });

  test('files go in and out as text and as base64, and stay inside the sandbox\'s roots', async () => {
    const call = (name, args) => client.callTool({ name, arguments: { session_id: sessionId, ...args } });
    const sh = async (script) => {
      const r = await call('exec', { argv: ['sh', '-c', script] });
      assert.equal(r.structuredContent.exit_code, 0, JSON.stringify(r.content));
    };
    await sh('mkdir /tmp/mcp');
    const text = 'Grüße 🙂\nline two\n';
    const w = await call('file_write', { path: '/tmp/mcp/notes.txt', text });
    assert.equal(w.isError, false, JSON.stringify(w.content));
    assert.equal(w.structuredContent.size, Buffer.byteLength(text));
    assert.equal(w.structuredContent.sha256, crypto.createHash('sha256').update(text).digest('hex'));
    const r = await call('file_read', { path: '/tmp/mcp/notes.txt' });
    assert.equal(r.isError, false, JSON.stringify(r.content));
    assert.equal(r.structuredContent.text, text);

    const bytes = Buffer.from([0, 1, 2, 0xff, 0xfe, 0x80, 10]);
    const wb = await call('file_write', { path: '/tmp/mcp/blob.bin', base64: bytes.toString('base64') });
    assert.equal(wb.isError, false, JSON.stringify(wb.content));
    const rb = await call('file_read', { path: '/tmp/mcp/blob.bin' });
    assert.equal(rb.structuredContent.base64, bytes.toString('base64'), 'not UTF-8: base64');
    const asText = await call('file_read', { path: '/tmp/mcp/blob.bin', encoding: 'text' });
    assert.equal(asText.isError, true);
    // What the API sees is what MCP wrote.
    const viaApi = await fetch(`${server.base}/v1/sessions/${sessionId}/files?path=/tmp/mcp/blob.bin`,
      { headers: { authorization: `Bearer ${server.key}` } });
    assert.equal(viaApi.status, 200);
    assert.deepEqual(Buffer.from(await viaApi.arrayBuffer()), bytes);

    const list = await call('file_list', { dir: '/tmp/mcp' });
    assert.equal(list.isError, false, JSON.stringify(list.content));
    assert.deepEqual(list.structuredContent.entries.map((e) => e.name).sort(), ['blob.bin', 'notes.txt']);

    for (const [name, args] of [
      ['file_read', { path: '/etc/passwd' }],
      ['file_read', { path: '/tmp/../etc/passwd' }],
      ['file_write', { path: '/usr/bin/evil', text: 'x' }],
      ['file_write', { path: '/tmp/x', text: 'a', base64: 'YQ==' }],
      ['file_write', { path: '/tmp/x', base64: 'not base64!' }],
      ['file_list', { dir: '/' }],
    ]) {
      const bad = await call(name, args);
      assert.equal(bad.isError, true, `${name} ${JSON.stringify(args)}`);
      assert.match(bad.content[0].text, /^[a-z_]+: /);
    }
    await sh('head -c 5000000 /dev/zero > /tmp/mcp/big');
    const big = await call('file_read', { path: '/tmp/mcp/big' });
    assert.equal(big.isError, true);
    assert.match(big.content[0].text, /^file_too_large: /);
  });

  test('errors are tool errors: bad arguments, and a deleted session', async () => {
    const bad = await client.callTool({ name: 'exec', arguments: { session_id: sessionId, argv: 'ls' } });
    assert.equal(bad.isError, true);
    assert.match(bad.content[0].text, /^invalid_request: /);

    const del = await client.callTool({ name: 'session_delete', arguments: { session_id: sessionId } });
    assert.equal(del.isError, false, JSON.stringify(del.content));
    created.delete(sessionId);
    const gone = await client.callTool({ name: 'screenshot', arguments: { session_id: sessionId } });
    assert.equal(gone.isError, true);
    assert.match(gone.content[0].text, /^session_(not_found|ended): /);
    const none = await client.callTool({
      name: 'navigate', arguments: { session_id: 'ses_00000000000000000000', url: 'about:blank' },
    });
    assert.equal(none.isError, true);
    assert.match(none.content[0].text, /^session_not_found: /);
  });

  test('an unknown tool or method is a protocol error', async () => {
    await assert.rejects(client.callTool({ name: 'format_disk', arguments: {} }), /-32602|unknown tool/i);
    const r = await post(server, { jsonrpc: '2.0', id: 5, method: 'resources/list' });
    assert.equal(r.status, 200);
    assert.equal(r.json.error.code, -32601);
    assert.equal(r.json.id, 5);
    const parse = await post(server, '{"jsonrpc":');
    assert.equal(parse.status, 400);
    assert.equal(parse.json.error.code, -32700);
    // Bytes that are not UTF-8 are a parse error whose message quotes them: they are replaced
    // in the answer, which stays well-formed JSON.
    const bytes = Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":6,"method":"x'),
      Buffer.from([0x90, 0xff]), Buffer.from('"}')]);
    const odd = await post(server, bytes);
    assert.equal(odd.status, 400);
    assert.equal(odd.json.error.code, -32700);
    assert.equal((await server.api('GET', '/healthz')).status, 200);
    const note = await post(server, { jsonrpc: '2.0', method: 'notifications/initialized' });
    assert.equal(note.status, 202);
    assert.equal(note.text, '');
  });

  test('no key, a bad key, another origin, another method and an unknown revision are refused', async () => {
    await assert.rejects(connect(server, { key: null }), /unauthenticated/);
    const nokey = await api(server.base, null, 'POST', '/mcp', { jsonrpc: '2.0', id: 1, method: 'ping' });
    assert.equal(nokey.status, 401);
    assert.match(nokey.headers.get('www-authenticate'), /^Bearer/);
    assert.equal((await post(server, { jsonrpc: '2.0', id: 1, method: 'ping' },
      { authorization: 'Bearer nope' })).status, 401);
    const cross = await post(server, { jsonrpc: '2.0', id: 1, method: 'ping' },
      { origin: 'http://evil.example' });
    assert.equal(cross.status, 403);
    assert.equal(cross.json.error.code, 'cross_origin');
    const same = await post(server, { jsonrpc: '2.0', id: 1, method: 'ping' }, { origin: server.base });
    assert.equal(same.status, 200);
    assert.deepEqual(same.json, { jsonrpc: '2.0', id: 1, result: {} });
    const get = await server.api('GET', '/mcp');
    assert.equal(get.status, 405);
    const rev = await post(server, { jsonrpc: '2.0', id: 1, method: 'ping' },
      { 'mcp-protocol-version': '1999-01-01' });
    assert.equal(rev.status, 400);
  });

  test('a tenant key reaches only its own sessions through MCP', async () => {
    const key = await server.api('POST', '/v1/keys', { name: 'mcp-tenant', max_sessions: 2,
      max_creates_per_minute: 10 });
    assert.equal(key.status, 201, key.text);
    const owner = await server.createSession({});
    created.add(owner.id);
    const tenant = await connect(server, { key: key.json.key });
    try {
      const r = await tenant.callTool({ name: 'exec', arguments: { session_id: owner.id, argv: ['true'] } });
      assert.equal(r.isError, true);
      assert.match(r.content[0].text, /^session_not_found: /);
      const nav = await tenant.callTool({ name: 'navigate', arguments: { session_id: owner.id, url: 'about:blank' } });
      assert.match(nav.content[0].text, /^session_not_found: /);
      for (const [name, args] of [['file_read', { path: '/etc/hostname' }],
        ['file_write', { path: '/tmp/x', text: 'x' }], ['file_list', { dir: '/tmp' }]]) {
        const f = await tenant.callTool({ name, arguments: { session_id: owner.id, ...args } });
        assert.match(f.content[0].text, /^session_not_found: /, name);
      }
      const list = await tenant.callTool({ name: 'session_list', arguments: {} });
      assert.ok(!list.structuredContent.sessions.some((s) => s.id === owner.id));
    } finally {
      await tenant.close();
    }
  });
});
