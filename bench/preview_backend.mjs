// The backend both proxies front in the preview benchmark: a small answer and a large streamed
// one, and an echo behind an upgrade. Runs on the host behind nginx and inside a sandbox behind
// Cabin's preview proxy.
// Usage: node preview_backend.mjs PORT
import http from 'node:http';

const SMALL = Buffer.from('hello, preview\n');
const CHUNK = Buffer.alloc(256 << 10, 120);

const server = http.createServer({ keepAliveTimeout: 60000 }, (req, res) => {
  const big = /^\/big\/(\d+)$/.exec(req.url);
  if (big) {
    let left = Number(big[1]);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': left });
    const more = () => {
      while (left > 0) {
        const n = Math.min(left, CHUNK.length);
        left -= n;
        if (!res.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) {
          res.once('drain', more);
          return;
        }
      }
      res.end();
    };
    more();
    return;
  }
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': SMALL.length });
  res.end(SMALL);
});
// An upgrade becomes a byte echo: after the 101 the proxy only pumps, whatever the bytes are.
server.on('upgrade', (req, socket) => {
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
  socket.pipe(socket);
});
server.listen(Number(process.argv[2]), '127.0.0.1');
