// The world an egress test's sandbox looks out on: HTTP and HTTPS servers on the host's loopback
// (reached by the names cabindArgs() pins), a CA of the test's that vouches for the HTTPS one
// (cabind's --extra-ca-file), and a UDP name server that answers only the names of SERVED_NAMES
// and keeps every other query it is asked (dnsQueries: a name the policy denied must never be
// among them).
import { execFileSync } from 'node:child_process';
import dgram from 'node:dgram';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

import { chromium } from 'playwright-core';
import { WebSocketServer } from 'ws';

import { removeTree } from './helpers.mjs';

// Runs `fn(page, browser)` on a session's first page through Playwright over its cdp_url, and
// lets go of the browser after, whatever happened.
export async function withPage(cdpUrl, fn) {
  const browser = await chromium.connectOverCDP(cdpUrl);
  try {
    return await fn(browser.contexts()[0].pages()[0], browser);
  } finally {
    await browser.close();
  }
}

// What the name server answers, by name: the nth A query gets the nth list of addresses (the
// last repeats); AAAA gets none. rebind.test first answers the site's address and then the inner
// one, as a rebinding attacker's server does with a TTL of 0; mixed.test answers both at once,
// the inner one first.
// cabind may reach 127.0.0.1 only (--egress-allow-host-cidr): 127.0.0.2 is as closed to sandboxes as
// any private address, and a server there counts what gets through.
const INNER_ADDRESS = '127.0.0.2';
export const SERVED_NAMES = {
  'rebind.test': [['127.0.0.1'], [INNER_ADDRESS]],
  'mixed.test': [[INNER_ADDRESS, '127.0.0.1']],
};

// The question of a DNS query: its id, name (lowercase) and type; null if it is not one.
export function dnsQuestion(msg) {
  if (msg.length < 17 || msg.readUInt16BE(4) !== 1) return null;
  const labels = [];
  let at = 12;
  while (at < msg.length && msg[at] !== 0) {
    const n = msg[at];
    if (n > 63 || at + 1 + n > msg.length) return null;
    labels.push(msg.subarray(at + 1, at + 1 + n).toString('latin1'));
    at += 1 + n;
  }
  if (at + 5 > msg.length) return null;
  return { id: msg.readUInt16BE(0), name: labels.join('.').toLowerCase(), type: msg.readUInt16BE(at + 1),
           question: msg.subarray(12, at + 5) };
}

// The answer to `q`: its question echoed, and one A record (TTL 0) for each address.
export function dnsAnswer(q, addresses) {
  const head = Buffer.alloc(12);
  head.writeUInt16BE(q.id, 0);
  head.writeUInt16BE(0x8180, 2);  // a response, recursion desired and available, no error
  head.writeUInt16BE(1, 4);
  head.writeUInt16BE(addresses.length, 6);
  const records = addresses.map((a) => {
    const r = Buffer.alloc(16);
    r.writeUInt16BE(0xc00c, 0);  // the name: a pointer to the question's
    r.writeUInt16BE(1, 2);
    r.writeUInt16BE(1, 4);
    r.writeUInt32BE(0, 6);
    r.writeUInt16BE(4, 10);
    a.split('.').forEach((b, i) => { r[12 + i] = Number(b); });
    return r;
  });
  return Buffer.concat([head, q.question, ...records]);
}

// The host's own first non-loopback IPv4 address: a sandbox must have no way to it, and a probe
// aimed there stays on this machine whatever happens.
export function hostAddress() {
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  throw new Error('this machine has no IPv4 address but loopback');
}

// Sends an ICMP echo to argv[1] on a raw socket and on a ping socket, and prints for each what
// happened: the errno's name, or "sent" (a route) and then "reply" if one came back.
export const ICMP_PROBE = `
import errno, socket, sys
for kind in (socket.SOCK_RAW, socket.SOCK_DGRAM):
    try:
        s = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        s.settimeout(2)
        s.sendto(b"\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00", (sys.argv[1], 0))
        print("sent")
        s.recv(64)
        print("reply")
    except socket.timeout:
        print("no reply")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
`;

async function listen(server) {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server.address().port;
}

// A Python program for a sandbox: 200 connections to the egress proxy, each a plain POST to
// `authority` of an 8 MiB body, written as fast as the proxy takes it for `seconds`; it prints
// how many bytes went.
export function slowUploads(authority, seconds) {
  return `
import socket, time
n = 8 << 20
conns = []
for i in range(200):
    c = socket.create_connection(("127.0.0.1", 3128), 5)
    c.sendall(("POST http://${authority}/ HTTP/1.1\\r\\nHost: ${authority}\\r\\n"
               "Content-Length: %d\\r\\n\\r\\n" % n).encode())
    c.setblocking(False)
    conns.append([c, 0])
chunk = b"x" * 65536
deadline = time.time() + ${seconds}
while time.time() < deadline:
    for e in conns:
        try:
            e[1] += e[0].send(chunk)
        except BlockingIOError:
            pass
    time.sleep(0.05)
print(sum(e[1] for e in conns))
`;
}

// The names the HTTPS site's certificate carries, and that cabindArgs() pins to 127.0.0.1.
export const TLS_NAMES = ['site.test', 'other.test', 'vault.test'];

export async function startEgressWorld() {
  const servers = {};
  const dnsQueries = [];  // queries for names the server does not serve, described
  const servedQueries = [];  // {name, type} of those it answered
  const tlsRequests = [];  // what the HTTPS site received: url, headers, body
  const otherRequests = [];  // every request other.test's HTTP server got
  const innerRequests = [];  // every request that reached the inner address
  // site.test's pages: a redirect to other.test, and a page that pulls other.test's resources
  // and hints at names nobody may look up.
  servers.site = http.createServer((req, res) => {
    if (req.url === '/to-other') {
      res.writeHead(302, { Location: `http://other.test:${servers.otherPort}/landed` });
      res.end();
    } else if (req.url === '/embeds') {
      const o = `http://other.test:${servers.otherPort}`;
      res.setHeader('Content-Type', 'text/html');
      res.end('<link rel="dns-prefetch" href="//prefetch.denied.test">' +
              '<link rel="preconnect" href="https://preconnect.denied.test">' +
              `<img src="${o}/img.png"><script src="${o}/s.js"></script>` +
              `<iframe src="${o}/frame"></iframe><p id="done">embeds</p>`);
    } else {
      res.end(`site.test says hello to ${req.url}`);
    }
  });
  servers.other = http.createServer((req, res) => {
    otherRequests.push(req.url);
    res.end('other.test');
  });
  // WebSocket echo on site.test's and other.test's ports.
  for (const s of [servers.site, servers.other]) {
    const wss = new WebSocketServer({ server: s });
    wss.on('connection', (ws) => ws.on('message', (m) => ws.send(`echo ${m}`)));
  }
  const certDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-egress-'));
  const at = (f) => path.join(certDir, f);
  const ecKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  execFileSync('openssl', ['req', '-x509', ...ecKey, '-days', '2', '-subj', '/CN=Egress test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign',
    '-keyout', at('ca.key'), '-out', at('ca.pem')], { stdio: 'ignore' });
  execFileSync('openssl', ['req', ...ecKey, '-subj', '/CN=site.test', '-keyout', at('key.pem'),
    '-out', at('csr.pem')], { stdio: 'ignore' });
  fs.writeFileSync(at('ext.cnf'), `subjectAltName=${TLS_NAMES.map((n) => `DNS:${n}`).join(',')}\n` +
    'extendedKeyUsage=serverAuth\n');
  execFileSync('openssl', ['x509', '-req', '-in', at('csr.pem'), '-CA', at('ca.pem'),
    '-CAkey', at('ca.key'), '-CAcreateserial', '-days', '2', '-extfile', at('ext.cnf'),
    '-out', at('cert.pem')], { stdio: 'ignore' });
  servers.tls = https.createServer({
    key: fs.readFileSync(at('key.pem')),
    cert: fs.readFileSync(at('cert.pem')),
  }, (req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      tlsRequests.push({ url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() });
      if (req.url === '/form') {
        res.setHeader('Content-Type', 'text/html');
        res.end('<form method="post" action="/login"><input name="user" value="agent">' +
                '<input name="pass" id="pass"><button id="go">go</button></form>');
      } else {
        res.end(req.url === '/login' ? 'logged in' : 'site.test over TLS');
      }
    });
  });
  for (const [name, s] of Object.entries(servers)) servers[`${name}Port`] = await listen(s);
  // On the site's port, as a rebound name would point there.
  const inner = http.createServer((req, res) => {
    innerRequests.push(req.url);
    res.end('inner');
  });
  inner.listen(servers.sitePort, INNER_ADDRESS);
  await once(inner, 'listening');
  const dns = dgram.createSocket('udp4');
  const asked = new Map();  // name -> A queries so far
  dns.on('message', (msg, from) => {
    const q = dnsQuestion(msg);
    const answers = q && SERVED_NAMES[q.name];
    if (!answers) {
      // Said in full, for a failed assertion to name what was asked, by whom and when.
      dnsQueries.push(q ? `${q.name} (type ${q.type}) from port ${from.port} at ${new Date().toISOString()}`
                        : `not a query: ${msg.toString('hex')}`);
      return;
    }
    servedQueries.push({ name: q.name, type: q.type });
    let addresses = [];
    if (q.type === 1) {
      const n = asked.get(q.name) ?? 0;
      asked.set(q.name, n + 1);
      addresses = answers[Math.min(n, answers.length - 1)];
    }
    dns.send(dnsAnswer(q, addresses), from.port, from.address);
  });
  dns.bind(0, '127.0.0.1');
  await once(dns, 'listening');
  return {
    servers,
    dnsQueries,
    servedQueries,
    tlsRequests,
    otherRequests,
    innerRequests,
    // The HTTPS site's key and certificate (for TLS_NAMES), for other servers of a test's.
    tlsFiles: { key: at('key.pem'), cert: at('cert.pem') },
    cabindArgs: () => [
      ...['site.test', 'other.test', 'vault.test', 'a.b.wiki.test'].flatMap((n) => ['--egress-resolve', `${n}=127.0.0.1`]),
      // A name whose only address is private, as a rebinding name would answer.
      '--egress-resolve', 'private.test=10.20.30.40',
      '--egress-allow-host-cidr', '127.0.0.1/32', '--egress-dns', `127.0.0.1:${dns.address().port}`,
      '--extra-ca-file', at('ca.pem')],
    close: async () => {
      for (const s of [servers.site, servers.other, servers.tls, inner]) s.close();
      dns.close();
      await removeTree(certDir);
    },
  };
}
