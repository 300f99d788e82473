// The audit log against a real cabind: what requests did to sessions, by whom and how it went,
// and how sessions ended, one JSON object per line in <state-dir>/audit.log.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { useCabind, waitFor } from './helpers.mjs';

const ctx = useCabind();

function entries() {
  const file = path.join(ctx.server.stateDir, 'audit.log');
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

test('creates, exec, computer batches, tokens, pauses, deletes and ends are recorded', async () => {
  const s = await ctx.server.createSession({});
  const ran = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['sh', '-c', 'exit 3'] });
  assert.equal(ran.status, 200, ran.text);
  const batch = await ctx.server.api('POST', `/v1/sessions/${s.id}/computer`, {
    actions: [{ op: 'move', x: 10, y: 10 }, { op: 'cursor_position' }],
  });
  assert.equal(batch.status, 200, batch.text);
  assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'view' })).status, 201);
  assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`)).status, 200);
  const refused = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['true'] });
  assert.equal(refused.status, 409);
  assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/resume`)).status, 200);
  assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  const t = await ctx.server.createSession({ timeout_s: 1 });
  await waitFor(() => entries().some((e) => e.action === 'session.end' && e.session === t.id),
                { what: 'the timed-out session\'s end' });

  const mine = entries().filter((e) => e.session === s.id);
  const at = (action, i = 0) => mine.filter((e) => e.action === action)[i];
  assert.deepEqual(mine.map((e) => e.action), ['session.create', 'exec', 'computer', 'token.mint',
    'session.pause', 'exec', 'session.resume', 'session.end', 'session.delete']);
  assert.equal(at('session.create').driver, 'namespace');
  assert.equal(at('session.create').key, 'admin');
  assert.deepEqual(at('exec').argv, ['sh', '-c', 'exit 3']);
  assert.equal(at('exec').exit_code, 3);
  assert.equal(at('exec', 1).outcome, 'session_paused');
  assert.equal(at('exec', 1).status, 409);
  assert.deepEqual(at('computer').actions, ['move', 'cursor_position']);
  assert.equal(at('token.mint').scope, 'view');
  assert.equal(at('session.end').reason, 'deleted');
  for (const e of mine) assert.match(e.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  const end = entries().find((e) => e.action === 'session.end' && e.session === t.id);
  assert.equal(end.reason, 'timeout');
  // Nothing that reads is recorded, and no key or token is ever written.
  const text = fs.readFileSync(path.join(ctx.server.stateDir, 'audit.log'), 'utf8');
  assert.ok(!text.includes(ctx.server.key));
  assert.doesNotMatch(text, /token=/);
  const mode = fs.statSync(path.join(ctx.server.stateDir, 'audit.log')).mode & 0o777;
  assert.equal(mode, 0o600);
});
