// RFB viewers that measure: run INSIDE a sandbox (node reads this file from stdin) so cabin's
// server and x11vnc are reached the same way, over the sandbox's loopback. Each viewer keeps one
// incremental update request outstanding, as noVNC does, and asks for ZRLE and CopyRect (both
// servers are libvncserver underneath, so the encoders are the same and only what they capture
// and send differs).
//
// Environment: PORT, VIEWERS, T0 (ms since the epoch: the scene starts), PHASE_MS, PHASES
// (comma-separated names), SERVER_PID. Prints one JSON object: per phase, updates and bytes per
// viewer and the server's CPU seconds.
import fs from 'node:fs';
import net from 'node:net';

const PORT = Number(process.env.PORT);
const VIEWERS = Number(process.env.VIEWERS);
const T0 = Number(process.env.T0);
const PHASE_MS = Number(process.env.PHASE_MS);
const PHASES = process.env.PHASES.split(',');
const PID = Number(process.env.SERVER_PID);
const TICK = 100; // clock ticks per second (Linux USER_HZ)

function cpuSeconds() {
  const stat = fs.readFileSync(`/proc/${PID}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / TICK; // utime + stime
}

function phaseAt(t) {
  const i = Math.floor((t - T0) / PHASE_MS);
  return i >= 0 && i < PHASES.length ? PHASES[i] : null;
}

class Viewer {
  constructor() {
    this.buf = Buffer.alloc(0);
    this.stats = Object.fromEntries(PHASES.map((p) => [p, { updates: 0, bytes: 0 }]));
    this.state = 'version';
    this.need = 12;
    this.sock = net.connect(PORT, '127.0.0.1');
    this.sock.setNoDelay(true);
    this.sock.on('data', (d) => this.data(d));
    this.sock.on('error', (e) => { this.error = String(e); });
  }
  request(incremental) {
    const m = Buffer.alloc(10);
    m[0] = 3;
    m[1] = incremental ? 1 : 0;
    m.writeUInt16BE(this.w, 6);
    m.writeUInt16BE(this.h, 8);
    this.sock.write(m);
  }
  data(d) {
    const p = phaseAt(Date.now());
    if (p) this.stats[p].bytes += d.length;
    this.buf = Buffer.concat([this.buf, d]);
    for (;;) {
      if (this.buf.length < this.need) return;
      const chunk = this.buf.subarray(0, this.need);
      this.buf = this.buf.subarray(this.need);
      this.step(chunk);
    }
  }
  step(c) {
    switch (this.state) {
      case 'version': this.sock.write('RFB 003.008\n'); this.state = 'ntypes'; this.need = 1; break;
      case 'ntypes': this.state = 'types'; this.need = c[0]; break;
      case 'types': this.sock.write(Buffer.from([1])); this.state = 'secresult'; this.need = 4; break;
      case 'secresult': this.sock.write(Buffer.from([1])); this.state = 'init'; this.need = 24; break;
      case 'init': {
        this.w = c.readUInt16BE(0);
        this.h = c.readUInt16BE(2);
        this.state = 'name';
        this.need = c.readUInt32BE(20);
        if (this.need === 0) this.step(Buffer.alloc(0));
        break;
      }
      case 'name': {
        const pf = Buffer.alloc(20);
        Buffer.from([32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0]).copy(pf, 4);
        const enc = Buffer.alloc(12);
        enc[0] = 2;
        enc.writeUInt16BE(2, 2);
        enc.writeInt32BE(16, 4); // ZRLE
        enc.writeInt32BE(1, 8); // CopyRect, as noVNC asks
        this.sock.write(Buffer.concat([pf, enc]));
        this.request(false);
        this.state = 'msg';
        this.need = 1;
        break;
      }
      case 'msg':
        if (c[0] === 0) { this.state = 'fbu'; this.need = 3; }
        else if (c[0] === 3) { this.state = 'cut'; this.need = 7; }
        else if (c[0] === 2) { this.need = 1; }
        else throw new Error(`server message ${c[0]}`);
        break;
      case 'cut': {
        const n = c.readUInt32BE(3);
        if (n === 0) { this.state = 'msg'; this.need = 1; } else { this.state = 'skip'; this.after = 'msg'; this.need = n; }
        break;
      }
      case 'skip':
        if (this.after === 'rect') this.nextRect();
        else { this.state = 'msg'; this.need = 1; }
        break;
      case 'fbu': this.rects = c.readUInt16BE(1); this.nextRect(); break;
      case 'rect': {
        const w = c.readUInt16BE(4), h = c.readUInt16BE(6), enc = c.readInt32BE(8);
        if (enc === 16) { this.state = 'zlen'; this.need = 4; }
        else if (enc === 0) this.skipRect(w * h * 4);
        else if (enc === 1) this.skipRect(4);
        else if (enc === -223) this.skipRect(0);
        else throw new Error(`encoding ${enc}`);
        break;
      }
      case 'zlen': this.skipRect(c.readUInt32BE(0)); break;
      default: throw new Error(this.state);
    }
  }
  skipRect(n) {
    if (n === 0) { this.nextRect(); return; }
    this.state = 'skip';
    this.after = 'rect';
    this.need = n;
  }
  nextRect() {
    if (this.rects === 0) {
      const p = phaseAt(Date.now());
      if (p) this.stats[p].updates++;
      this.request(true); // one request outstanding at all times
      this.state = 'msg';
      this.need = 1;
      return;
    }
    this.rects--;
    this.state = 'rect';
    this.need = 12;
  }
}

const viewers = Array.from({ length: VIEWERS }, () => new Viewer());
const cpu = {};
const marks = [];
for (let i = 0; i <= PHASES.length; i++) {
  marks.push(new Promise((resolve) => {
    setTimeout(() => { cpu[i] = cpuSeconds(); resolve(); }, Math.max(0, T0 + i * PHASE_MS - Date.now()));
  }));
}
await Promise.all(marks);
const out = { viewers: VIEWERS, phases: {} };
PHASES.forEach((p, i) => {
  out.phases[p] = {
    updates_per_viewer: viewers.reduce((a, v) => a + v.stats[p].updates, 0) / VIEWERS,
    bytes_per_viewer: viewers.reduce((a, v) => a + v.stats[p].bytes, 0) / VIEWERS,
    cpu_s: cpu[i + 1] - cpu[i],
  };
});
out.errors = viewers.map((v) => v.error).filter(Boolean);
for (const v of viewers) v.sock.destroy();
console.log(JSON.stringify(out));
