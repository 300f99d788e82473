// Egress from a microVM: the guest has no route out (QEMU's user network with restrict=on) and no
// resolver; its only way out is its agent's door, which hands each connection to the egress
// port to one that cabind keeps waiting, over the agent's own forwarded port. The core probes of
// egress.test.mjs, from the guest's Chromium and from commands in the guest. Slow: a guest boots
// in tens of seconds under TCG.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { hostAddress, startEgressWorld, withPage } from './egress_world.mjs';
import { useCabind, waitFor, withDeadline } from './helpers.mjs';

const world = await startEgressWorld();
const { servers, dnsQueries, tlsRequests, innerRequests } = world;
after(() => world.close());
const ctx = useCabind({ args: () => world.cabindArgs() });
const BOOT_MS = 240000;
const BUSYBOX = '/opt/cabin/bin/busybox';

async function exec(id, argv, timeout_ms = 30000, env = undefined) {
  const r = await ctx.server.api('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms, env });
  assert.equal(r.status, 200, r.text);
  return r.json;
}
// A request to the proxy the agent names in http_proxy, written by hand (busybox's wget crashes
// when given a proxy): the answer's text.
async function proxied(id, url) {
  const { host } = new URL(url);
  const req = `GET ${url} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;
  const r = await exec(id, [BUSYBOX, 'sh', '-c',
    `printf '%s' "$REQ" | ${BUSYBOX} nc -w 10 127.0.0.1 3128`], 30000, { REQ: req });
  return r.stdout;
}

async function networkLog(id) {
  const r = await ctx.server.api('GET', `/v1/sessions/${id}/network/log`);
  assert.equal(r.status, 200, r.text);
  return r.text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

describe('egress from a microVM', { timeout: BOOT_MS + 240000 }, () => {
  let s;
  const value = `vault_${Math.random().toString(36).slice(2)}Q7`;
  before(async () => {
    s = await withDeadline(ctx.server.createSession({
      driver: 'microvm',
      resources: { vcpus: 2, memory_mb: 2048 },
      network: {
        mode: 'allowlist',
        allow: [{ host: 'site.test', ports: [servers.sitePort, servers.tlsPort] },
                { host: '*.wiki.test', ports: [servers.sitePort] },
                { host: 'rebind.test', ports: [servers.sitePort] },
                { host: 'vault.test', ports: [servers.tlsPort] }],
        secrets: [{ name: 'vault', value, hosts: ['vault.test'], ports: [servers.tlsPort],
                    format: 'Bearer {value}', substitute: ['body'] }],
      },
    }), BOOT_MS, 'a microVM session to start');
  }, { timeout: BOOT_MS + 10000 });
  after(async () => {
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('the guest\'s Chromium reaches what the policy allows, and nothing else', async () => {
    assert.equal(s.driver, 'microvm');
    assert.equal(s.network.mode, 'allowlist');
    await withPage(s.cdp_url, async (page, browser) => {
      const status = async (url) => (await page.goto(url)).status();
      const sp = servers.sitePort;
      assert.equal(await status(`http://site.test:${sp}/a`), 200);
      assert.equal(await page.textContent('body'), 'site.test says hello to /a');
      assert.equal(await status(`http://SITE.Test.:${sp}/b`), 200);
      assert.equal(await status(`http://a.b.wiki.test:${sp}/`), 200);
      // The operator's CA is in the guest's NSS database.
      assert.equal(await status(`https://site.test:${servers.tlsPort}/`), 200);
      assert.equal(await page.textContent('body'), 'site.test over TLS');
      for (const url of [`http://other.test:${servers.otherPort}/`, `http://wiki.test:${sp}/`,
        `http://evilwiki.test:${sp}/`, `http://wiki.test.evil.test:${sp}/`]) {
        assert.equal(await status(url), 403, url);
      }
      // A failed navigation commits its error page after goto has failed: each gets a page of
      // its own, so that the commit cannot cut the next navigation short.
      const fails = async (url, error) => {
        const other = await browser.contexts()[0].newPage();
        await assert.rejects(other.goto(url), error);
        await other.close();
      };
      // Chromium goes to a link-local address itself (its proxy settings always bypass those)
      // and finds nothing there: the guest's network is QEMU's restricted one.
      await fails('http://169.254.169.254/latest/meta-data/',
                  /ERR_(CONNECTION_REFUSED|ADDRESS_UNREACHABLE|CONNECTION_FAILED)/);
      await fails(`https://other.test:${servers.tlsPort}/`, /ERR_TUNNEL_CONNECTION_FAILED/);

      // The secret: the agent types its placeholder; the site gets the value.
      tlsRequests.length = 0;
      await page.goto(`https://vault.test:${servers.tlsPort}/form`).catch(async (err) => {
        const why = (await networkLog(s.id)).filter((r) => r.host === 'vault.test');
        throw new Error(`${err.message}\nvault.test in the log: ${JSON.stringify(why)}`);
      });
      await page.fill('#pass', s.network.secrets[0].placeholder);
      await Promise.all([page.waitForURL(/\/login$/), page.click('#go')]);
      assert.equal(await page.textContent('body'), 'logged in');
      const login = tlsRequests.find((r) => r.url === '/login');
      assert.ok(login, JSON.stringify(tlsRequests));
      assert.equal(login.body, `user=agent&pass=${value}`);
      assert.equal(login.headers.authorization, `Bearer ${value}`);
      assert.doesNotMatch(await page.content(), new RegExp(value));
    });
  });

  test('commands in the guest get the proxy, and no route, resolver or secret of their own', async () => {
    const sp = servers.sitePort;
    assert.match(await proxied(s.id, `http://site.test:${sp}/x`),
                 /^HTTP\/1\.1 200 [^]*site\.test says hello to \/x$/);
    // Addresses in every form the proxy reads, and a placeholder bound to another host.
    for (const url of [`http://other.test:${servers.otherPort}/`,
      'http://169.254.169.254/latest/meta-data/', 'http://[::ffff:169.254.169.254]/',
      'http://[64:ff9b::a9fe:a9fe]/', 'http://10.0.0.1/', `http://[::ffff:127.0.0.1]:${sp}/`,
      `http://0x7f.1:${sp}/`, `http://2130706433:${sp}/`,
      `http://site.test:${sp}/?k=${s.network.secrets[0].placeholder}`]) {
      assert.match(await proxied(s.id, url), /^HTTP\/1\.1 403 /, url);
    }
    // A name that rebinds to an address the guest may not reach: checked again on each request.
    assert.match(await proxied(s.id, `http://rebind.test:${sp}/first`), /^HTTP\/1\.1 200 /);
    assert.match(await proxied(s.id, `http://rebind.test:${sp}/again`),
                 /^HTTP\/1\.1 403 [^]*127\.0\.0\.2/);
    assert.deepEqual(innerRequests, []);
    // ICMP, even to the host's own address: QEMU's restricted network drops it.
    const ping = await exec(s.id, [BUSYBOX, 'ping', '-c', '2', '-w', '4', hostAddress()]);
    assert.notEqual(ping.exit_code, 0, JSON.stringify(ping));
    assert.doesNotMatch(ping.stdout, /bytes from/);
    // The host's side of QEMU's network, and the guest's own loopback: nothing answers.
    for (const host of ['10.0.2.2', '127.0.0.1']) {
      const r = await exec(s.id, [BUSYBOX, 'sh', '-c',
        `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | ${BUSYBOX} nc -w 3 ${host} ${sp}`]);
      assert.doesNotMatch(r.stdout, /HTTP\//, `${host}:${sp}: ${JSON.stringify(r)}`);
    }
    // Chromium's managed policy is in the image.
    const policy = await exec(s.id, [BUSYBOX, 'cat', '/etc/chromium/policies/managed/cabin.json']);
    assert.equal(JSON.parse(policy.stdout).ProxySettings.ProxyServer, 'http://127.0.0.1:3128');
    const lookup = await exec(s.id, [BUSYBOX, 'nslookup', 'site.test']);
    assert.notEqual(lookup.exit_code, 0, JSON.stringify(lookup));
    // The value is in no environment or file of the guest's (it goes in encoded, so that the
    // search's own command line does not hold it).
    const search = await exec(s.id, [BUSYBOX, 'sh', '-c',
      `env; v=$(echo ${Buffer.from(value).toString('base64')} | ${BUSYBOX} base64 -d); ` +
      `${BUSYBOX} grep -rlF -e "$v" /home /tmp /run /dev/shm 2>/dev/null; true`]);
    assert.match(search.stdout, /http_proxy=http:\/\/127\.0\.0\.1:3128/);
    assert.doesNotMatch(search.stdout, new RegExp(value));
  });

  test('the log has every decision, a live change closes the door, and no name was looked up', async () => {
    const log = await waitFor(async () => {
      const l = await networkLog(s.id);
      return l.some((r) => r.host === 'vault.test' && r.kind === 'http' && r.method === 'POST') && l;
    }, { what: 'the records of the guest\'s requests' });
    assert.ok(log.some((r) => r.host === 'other.test' && r.decision === 'deny'));
    assert.ok(log.some((r) => r.host === '169.254.169.254' && r.rule === 'always denied'));
    assert.ok(log.some((r) => r.host === '[64:ff9b::a9fe:a9fe]' && r.rule === 'always denied'));
    const posted = log.find((r) => r.host === 'vault.test' && r.method === 'POST');
    assert.deepEqual(posted.secrets, ['vault']);
    assert.doesNotMatch(JSON.stringify(log), new RegExp(value));
    const put = await ctx.server.api('PUT', `/v1/sessions/${s.id}/network`, { mode: 'none' });
    assert.equal(put.status, 200, put.text);
    assert.match(await proxied(s.id, `http://site.test:${servers.sitePort}/`),
                 /^HTTP\/1\.1 403 [^]*no network access/);
    assert.deepEqual(dnsQueries, []);
  });
});
