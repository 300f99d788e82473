// A minimal RFB 3.8 client for the tests: security None, 32-bit pixels (r<<16 g<<8 b), Raw
// rectangles only, over a WebSocket (the /vnc endpoint) or TCP (cabind vnc-forward).
import assert from 'node:assert/strict';

import { wsOpen } from './helpers.mjs';

export class RfbClient {
  constructor(send, close) {
    this.send = send;
    this.closeTransport = close;
    this.buf = Buffer.alloc(0);
    this.waiter = null;
    this.closed = null; // {code, reason} once the transport ended
  }
  push(data) {
    this.buf = Buffer.concat([this.buf, data]);
    this.wake();
  }
  end(info) {
    this.closed = info;
    this.wake();
  }
  wake() {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
  async read(n, timeoutMs = 15000) {
    const deadline = Date.now() + timeoutMs;
    while (this.buf.length < n) {
      if (this.closed) throw Object.assign(new Error('RFB connection closed'), this.closed);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`RFB: no ${n} bytes within ${timeoutMs} ms`);
      await new Promise((resolve) => {
        this.waiter = resolve;
        setTimeout(resolve, left);
      });
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  static ws(socket) {
    const c = new RfbClient((b) => socket.send(b), () => socket.close());
    socket.on('message', (d) => c.push(Buffer.from(d)));
    socket.on('close', (code, reason) => c.end({ code, reason: String(reason) }));
    return c;
  }
  static tcp(socket) {
    const c = new RfbClient((b) => socket.write(b), () => socket.destroy());
    socket.on('data', (d) => c.push(d));
    socket.on('close', () => c.end({ code: null, reason: 'tcp closed' }));
    socket.on('error', () => {});
    return c;
  }

  async handshake() {
    assert.equal(String(await this.read(12)), 'RFB 003.008\n');
    this.send(Buffer.from('RFB 003.008\n'));
    const n = (await this.read(1))[0];
    const types = [...(await this.read(n))];
    assert.ok(types.includes(1), `security types ${types} lack None`);
    this.send(Buffer.from([1]));
    assert.equal((await this.read(4)).readUInt32BE(0), 0, 'security result');
    this.send(Buffer.from([1])); // shared
    const init = await this.read(24);
    this.width = init.readUInt16BE(0);
    this.height = init.readUInt16BE(2);
    this.name = String(await this.read(init.readUInt32BE(20)));
    this.fb = Buffer.alloc(this.width * this.height * 4);
    const pf = Buffer.alloc(20);
    pf[0] = 0;
    Buffer.from([32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0]).copy(pf, 4);
    this.send(pf);
    const enc = Buffer.alloc(8);
    enc[0] = 2;
    enc.writeUInt16BE(1, 2);
    enc.writeInt32BE(0, 4); // Raw only
    this.send(enc);
  }
  request(incremental = false) {
    const m = Buffer.alloc(10);
    m[0] = 3;
    m[1] = incremental ? 1 : 0;
    m.writeUInt16BE(this.width, 6);
    m.writeUInt16BE(this.height, 8);
    this.send(m);
  }
  // Reads messages until one framebuffer update is applied.
  async update() {
    for (;;) {
      const type = (await this.read(1))[0];
      if (type === 3) {
        const h = await this.read(7);
        await this.read(h.readUInt32BE(3));
        continue;
      }
      if (type === 2) continue;
      assert.equal(type, 0, `server message type ${type}`);
      const n = (await this.read(3)).readUInt16BE(1);
      for (let i = 0; i < n; i++) {
        const r = await this.read(12);
        const [x, y, w, h] = [0, 2, 4, 6].map((o) => r.readUInt16BE(o));
        assert.equal(r.readInt32BE(8), 0, 'only Raw rectangles were asked for');
        const px = await this.read(w * h * 4);
        for (let row = 0; row < h; row++) {
          px.copy(this.fb, ((y + row) * this.width + x) * 4, row * w * 4, (row + 1) * w * 4);
        }
      }
      return n;
    }
  }
  async fullFrame() {
    this.request(false);
    await this.update();
  }
  rgb(x, y) {
    const o = (y * this.width + x) * 4;
    return [this.fb[o + 2], this.fb[o + 1], this.fb[o]];
  }
  pointer(mask, x, y) {
    const m = Buffer.alloc(6);
    m[0] = 5;
    m[1] = mask;
    m.writeUInt16BE(x, 2);
    m.writeUInt16BE(y, 4);
    this.send(m);
  }
  key(down, keysym) {
    const m = Buffer.alloc(8);
    m[0] = 4;
    m[1] = down ? 1 : 0;
    m.writeUInt32BE(keysym, 4);
    this.send(m);
  }
  cutText(text) {
    const t = Buffer.from(text, 'latin1');
    const m = Buffer.alloc(8);
    m[0] = 6;
    m.writeUInt32BE(t.length, 4);
    this.send(Buffer.concat([m, t]));
  }
  close() {
    this.closeTransport();
  }
}

// Opens `url` (a /vnc WebSocket) and completes the RFB handshake.
export async function wsViewer(url, opts = {}) {
  const socket = await wsOpen(url, opts);
  const c = RfbClient.ws(socket);
  c.socket = socket;
  await c.handshake();
  return c;
}
