// The world an egress test's sandbox looks out on: HTTP and HTTPS servers on the host's loopback
// (reached by the names cabindArgs() pins), a CA of the test's that vouches for the HTTPS one
// (cabind's --extra-ca-file), and a UDP name server that answers nothing and counts what it is
// asked.
import { execFileSync } from 'node:child_process';
import dgram from 'node:dgram';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

import { WebSocketServer } from 'ws';

import { removeTree } from './helpers.mjs';

async function listen(server) {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server.address().port;
}

// The names the HTTPS site's certificate carries, and that cabindArgs() pins to 127.0.0.1.
export const TLS_NAMES = ['site.test', 'other.test', 'vault.test'];

export async function startEgressWorld() {
  const servers = {};
  const dnsQueries = [];
  const tlsRequests = [];  // what the HTTPS site received: url, headers, body
  const otherRequests = [];  // every request other.test's HTTP server got
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
  const dns = dgram.createSocket('udp4');
  dns.on('message', (msg) => dnsQueries.push(msg));
  dns.bind(0, '127.0.0.1');
  await once(dns, 'listening');
  return {
    servers,
    dnsQueries,
    tlsRequests,
    otherRequests,
    cabindArgs: () => [
      ...['site.test', 'other.test', 'vault.test', 'a.b.wiki.test'].flatMap((n) => ['--egress-resolve', `${n}=127.0.0.1`]),
      // A name whose only address is private, as a rebinding name would answer.
      '--egress-resolve', 'private.test=10.20.30.40',
      '--egress-allow-cidr', '127.0.0.0/8', '--egress-dns', `127.0.0.1:${dns.address().port}`,
      '--extra-ca-file', at('ca.pem')],
    close: async () => {
      for (const s of [servers.site, servers.other, servers.tls]) s.close();
      dns.close();
      await removeTree(certDir);
    },
  };
}
