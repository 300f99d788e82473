// The console at /: sign in with an API key, list, create and delete sessions, watch each one's
// screen in a thumbnail, read its logs, copy its URLs and open its live view. The key lives in
// sessionStorage (this tab only) and goes to cabind as Authorization: Bearer on every call;
// nothing here works without it.
import {
  $, ApiError, call, type DriverInfo, explainEndReason, type Info, type Session,
} from './api';
import { menuButton, type MenuItem } from './menu';

const KEY_STORAGE = 'cabin.apiKey';
const THUMBS_STORAGE = 'cabin.thumbnails';
const REFRESH_MS = 5000;
const THUMB_WIDTH = 192;
// Thumbnails by session: kept across the list's refreshes, so that their streams go on.
const thumbs = new Map<string, HTMLImageElement>();

let apiKey: string | null = sessionStorage.getItem(KEY_STORAGE);
let refreshTimer: number | undefined;
let info: Info | null = null;

function describe(err: unknown): string {
  if (err instanceof ApiError) return `${err.message} (${err.code})`;
  return String((err as Error)?.message ?? err);
}

function showSignIn(message = ''): void {
  window.clearTimeout(refreshTimer);
  $('sign-in-panel').hidden = false;
  $('sessions-panel').hidden = true;
  $('sign-out').hidden = true;
  $('server-info').textContent = '';
  $('sign-in-error').textContent = message;
  $<HTMLInputElement>('api-key').focus();
}

// A 401 on any call means the stored key no longer works: back to the sign-in form.
function handleAuthFailure(err: unknown): boolean {
  if (err instanceof ApiError && err.status === 401) {
    sessionStorage.removeItem(KEY_STORAGE);
    apiKey = null;
    showSignIn('The API key was refused: ' + err.message);
    return true;
  }
  return false;
}

async function signIn(key: string): Promise<void> {
  try {
    info = await call<Info>('GET', '/v1/info', { key });
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      showSignIn('That API key is not valid.');
    } else {
      showSignIn('Cannot sign in: ' + describe(err));
    }
    return;
  }
  apiKey = key;
  sessionStorage.setItem(KEY_STORAGE, key);
  $('sign-in-panel').hidden = true;
  $('sessions-panel').hidden = false;
  $('sign-out').hidden = false;
  $('server-info').textContent = `cabind ${info.version}`;
  fillDrivers(info);
  await refresh();
}

// A driver's name in the menu: short, with what it runs on when that matters (KVM or TCG); its
// whole description goes in the option's title and in the hint under the form.
function driverLabel(d: DriverInfo): string {
  const name = d.name === 'microvm' ? 'microVM' : d.name;
  if (!d.available) return `${name} (unavailable)`;
  const accel = /^(KVM|TCG)\b/.exec(d.detail)?.[1];
  return accel ? `${name} (${accel})` : name;
}

function driverHint(): void {
  const name = $<HTMLSelectElement>('create-driver').value;
  const d = info?.drivers.find((x) => x.name === name);
  $('driver-hint').textContent = d ? `${d.isolation}: ${d.detail}` : '';
}

function fillDrivers(i: Info): void {
  const select = $<HTMLSelectElement>('create-driver');
  select.replaceChildren();
  for (const d of i.drivers) {
    const opt = document.createElement('option');
    opt.value = d.name;
    opt.textContent = driverLabel(d);
    opt.title = d.available ? d.detail : (d.unavailable_reason ?? 'unavailable');
    opt.disabled = !d.available;
    opt.selected = d.name === i.default_driver;
    select.append(opt);
  }
  driverHint();
  for (const id of ['create-width', 'create-height']) {
    const input = $<HTMLInputElement>(id);
    input.min = String(i.limits.resolution_min);
    input.max = String(i.limits.resolution_max);
  }
}

function when(iso: string | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  // Short enough for a narrow column; the year only when it is not this one.
  const year = d.getFullYear() === new Date().getFullYear() ? undefined : 'numeric';
  return d.toLocaleString(undefined, { year, month: 'short', day: 'numeric', hour: 'numeric',
                                       minute: '2-digit' });
}

function button(label: string, onClick: () => void, className = ''): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  if (className) b.className = className;
  b.addEventListener('click', onClick);
  return b;
}

async function copyText(text: string): Promise<void> {
  // The Clipboard API needs a secure context (https or loopback); elsewhere fall back to a
  // selected text field and the older copy command.
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const field = document.createElement('textarea');
  field.value = text;
  document.body.append(field);
  field.select();
  const ok = document.execCommand('copy');
  field.remove();
  if (!ok) throw new Error('the browser refused to copy');
}

function thumbnailsOn(): boolean {
  return sessionStorage.getItem(THUMBS_STORAGE) !== 'off';
}

// A small live picture of the screen: the session's MJPEG stream at a few frames a second, with
// the view token its live_view_url carries. A watched session is not idle, as with any viewer.
// Without a picture (not running, or no link) a box of the screen's shape says why.
function thumbnail(s: Session): HTMLElement {
  const td = document.createElement('td');
  td.className = 'thumb';
  if (!thumbnailsOn()) return td;
  if (s.status !== 'running' || !s.live_view_url) {
    const box = document.createElement('div');
    box.className = 'thumb-empty';
    box.style.aspectRatio = `${s.resolution.width} / ${s.resolution.height}`;
    box.textContent = s.status === 'running' ? 'no picture' : s.status;
    td.append(box);
    return td;
  }
  let img = thumbs.get(s.id);
  if (!img) {
    const token = new URL(s.live_view_url, location.href).searchParams.get('token') ?? '';
    const h = Math.max(1, Math.round((THUMB_WIDTH * s.resolution.height) / s.resolution.width));
    img = document.createElement('img');
    img.alt = `The screen of ${s.id}`;
    img.width = THUMB_WIDTH;
    img.height = h;
    img.src = `/v1/sessions/${encodeURIComponent(s.id)}/frames.mjpeg?fps=2&quality=60` +
              `&width=${THUMB_WIDTH}&height=${h}&token=${encodeURIComponent(token)}`;
    thumbs.set(s.id, img);
  }
  td.append(img);
  return td;
}

// Drops the thumbnails of sessions no longer listed: their streams close with the element.
function pruneThumbnails(listed: Set<string>): void {
  for (const [id, img] of thumbs) {
    if (listed.has(id) && thumbnailsOn()) continue;
    img.removeAttribute('src');
    thumbs.delete(id);
  }
}

// Chromium's complaints about what a sandbox has no use for (no D-Bus, no GPU) and Xvfb's about
// running unprivileged: every session logs them, none says anything about this one.
const NOISE = [
  /^\[[\d:/.]+:\w+:dbus\//,
  /^\[[\d:/.]+:\w+:gpu\/.*kTransientFailure/,
  /^_XSERVTransmkdir: /,
];
// A line's level, for its colour: cabind's and the agent's ("... error [agent] ..."), Chromium's
// ("[pid:tid:time:ERROR:file(line)] ...").
const LEVEL = /^\S+ (error|warn|critical) \[|^\[[\d:/.]+:(ERROR|WARNING|FATAL):/;

let logsOf = '';
let shownLogs = { lines: [] as string[], live: true };

function renderLogs(lines: string[], live: boolean): void {
  shownLogs = { lines, live };
  const body = $('logs-body');
  const frag = document.createDocumentFragment();
  let noise = 0;
  for (const line of lines) {
    const span = document.createElement('span');
    span.textContent = line + '\n';
    if (NOISE.some((re) => re.test(line))) {
      span.className = 'noise';
      noise += 1;
    } else {
      const level = LEVEL.exec(line);
      if (level) span.className = /^(error|critical|ERROR|FATAL)$/.test(level[1] ?? level[2])
        ? 'level-error' : 'level-warn';
    }
    frag.append(span);
  }
  body.replaceChildren(frag);
  if (!lines.length) body.textContent = '(no output yet)';
  $('logs-noise-count').textContent = String(noise);
  $('logs-noise-toggle').hidden = noise === 0;
  const note = $('logs-note');
  const notes = [];
  if (!live) notes.push('The session has ended: these are the last lines it wrote.');
  if (noise && noise === lines.length && !$<HTMLInputElement>('logs-noise').checked) {
    notes.push(`Only browser noise so far (${noise} lines hidden).`);
  }
  note.textContent = notes.join(' ');
  note.hidden = notes.length === 0;
}

async function showLogs(id: string): Promise<void> {
  if (!apiKey) return;
  const panel = $('logs-panel');
  logsOf = id;
  $('logs-title').textContent = id;
  if (panel.hidden || $('logs-body').dataset.id !== id) $('logs-body').textContent = 'Loading…';
  $('logs-body').dataset.id = id;
  panel.hidden = false;
  panel.scrollIntoView({ block: 'nearest' });
  try {
    const r = await call<{ lines: string[]; live: boolean }>(
      'GET', `/v1/sessions/${encodeURIComponent(id)}/logs`, { key: apiKey });
    if (logsOf === id) renderLogs(r.lines, r.live);
  } catch (err) {
    if (handleAuthFailure(err)) return;
    $('logs-body').textContent = 'Cannot read the logs: ' + describe(err);
  }
}

// The newest of each session the list returned: actions read their URLs from here when used, so
// that a row kept across refreshes never hands out an old token.
const latest = new Map<string, Session>();
// Rows by session, kept while what they show is the same: a refresh then moves no focus and
// closes no menu.
const rows = new Map<string, { sig: string; tr: HTMLTableRowElement }>();

function current(s: Session): Session {
  return latest.get(s.id) ?? s;
}

function copyAction(what: string, pick: (s: Session) => string | undefined, s: Session,
                    className: string): MenuItem {
  return {
    label: `Copy ${what}`,
    className: `copy ${className}`,
    run: () => {
      const text = pick(current(s));
      if (!text) return;
      copyText(text).then(
        () => setListState(`Copied the ${what} of ${s.id}.`),
        (err) => setListState('Copy failed: ' + describe(err)),
      );
    },
  };
}

function live(s: Session): boolean {
  return s.status !== 'ended' && s.status !== 'failed';
}

function cell(className: string, label = ''): HTMLTableCellElement {
  const td = document.createElement('td');
  td.className = className;
  // Shown before the value when the table is laid out as cards.
  if (label) td.dataset.label = label;
  return td;
}

function sessionRow(s: Session): HTMLTableRowElement {
  const tr = document.createElement('tr');
  tr.dataset.id = s.id;
  tr.dataset.state = s.status;
  tr.append(thumbnail(s));

  const session = cell('session');
  const id = document.createElement('div');
  id.className = 'mono id';
  id.textContent = s.id;
  const meta = document.createElement('div');
  meta.className = 'meta muted';
  const driver = document.createElement('span');
  driver.className = 'driver';
  driver.textContent = s.driver;
  const res = document.createElement('span');
  res.className = 'resolution';
  res.textContent = `${s.resolution.width}×${s.resolution.height}`;
  meta.append(driver, ' · ', res);
  session.append(id, meta);

  const state = cell('status');
  const badge = document.createElement('span');
  badge.className = 'badge';
  badge.dataset.state = s.status;
  badge.textContent = s.status;
  state.append(badge);
  if (s.end_reason) {
    const reason = document.createElement('div');
    reason.className = 'reason';
    reason.textContent = s.end_reason;
    const why = explainEndReason(s.end_reason);
    reason.title = why ? `${s.end_reason}: ${why}` : s.end_reason;
    state.append(reason);
  }

  const created = cell('created', 'Created');
  created.textContent = when(s.created_at);
  created.title = s.created_at;
  const ends = cell('ends', s.ended_at ? 'Ended' : 'Ends');
  ends.textContent = when(s.ended_at ?? s.expires_at);
  ends.title = s.ended_at ?? s.expires_at;

  const actions = cell('actions');
  const direct = document.createElement('div');
  direct.className = 'action-list';
  if (s.live_view_url) {
    const a = document.createElement('a');
    a.className = 'button live-link';
    a.href = s.live_view_url;
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    a.textContent = 'Live view';
    a.title = 'Watch the screen in a new tab';
    direct.append(a);
  }
  if (s.status === 'running') {
    const c = button('Take over', () => void openControl(s.id), 'control-link');
    c.title = 'Open the live view with a control link: watch, type and point';
    direct.append(c);
  }
  direct.append(button('Logs', () => void showLogs(s.id), 'logs'));
  const more: MenuItem[] = [copyAction('ID', (x) => x.id, s, 'copy-id')];
  if (s.cdp_url) more.push(copyAction('CDP URL', (x) => x.cdp_url, s, 'copy-cdp'));
  if (s.live_view_url) {
    more.push(copyAction('live view URL', (x) => x.live_view_url, s, 'copy-live'));
  }
  if (s.vnc_url) more.push(copyAction('VNC URL', (x) => x.vnc_url, s, 'copy-vnc'));
  if (s.status === 'running' || s.status === 'paused') {
    more.push({ label: 'Delete…', className: 'delete', danger: true,
                title: 'End the session and remove its sandbox',
                run: () => void deleteSession(s.id) });
  }
  direct.append(menuButton('⋯', `More actions for ${s.id}`, more));
  actions.append(direct);

  tr.append(session, state, created, ends, actions);
  return tr;
}

// What a row shows, but for its links' tokens (fresh in every answer).
function signature(s: Session): string {
  return JSON.stringify([s.status, s.end_reason, s.ended_at, s.expires_at, s.driver, s.resolution,
                         !!s.cdp_url, !!s.live_view_url, !!s.vnc_url, thumbnailsOn()]);
}

function renderSessions(list: Session[]): void {
  latest.clear();
  for (const s of list) latest.set(s.id, s);
  const trs = list.map((s) => {
    const sig = signature(s);
    let r = rows.get(s.id);
    if (!r || r.sig !== sig) {
      r = { sig, tr: sessionRow(s) };
      rows.set(s.id, r);
    } else {
      const link = r.tr.querySelector<HTMLAnchorElement>('a.live-link');
      if (link && s.live_view_url) link.href = s.live_view_url;
    }
    return r.tr;
  });
  for (const id of rows.keys()) if (!latest.has(id)) rows.delete(id);
  const body = $('sessions-body');
  const same = body.children.length === trs.length &&
               trs.every((tr, i) => body.children[i] === tr);
  if (!same) body.replaceChildren(...trs);
  $('sessions-empty').hidden = list.length > 0;
  $('sessions').hidden = list.length === 0;
  const running = list.filter(live).length;
  $('sessions-count').textContent = list.length
    ? (running === list.length ? `${running}` : `${running} live, ${list.length - running} ended`)
    : '';
  document.body.classList.toggle('no-thumbs', !thumbnailsOn());
}

function setListState(text: string): void {
  $('list-state').textContent = text;
}

async function refresh(): Promise<void> {
  window.clearTimeout(refreshTimer);
  if (!apiKey) return;
  const all = $<HTMLInputElement>('show-ended').checked;
  try {
    const r = await call<{ sessions: Session[] }>('GET', '/v1/sessions' + (all ? '?all=1' : ''), {
      key: apiKey,
    });
    pruneThumbnails(new Set(r.sessions.filter((x) => x.status === 'running').map((x) => x.id)));
    renderSessions(r.sessions);
    if ($('list-state').textContent?.startsWith('Cannot list')) setListState('');
  } catch (err) {
    if (handleAuthFailure(err)) return;
    setListState('Cannot list sessions: ' + describe(err));
  }
  refreshTimer = window.setTimeout(() => void refresh(), REFRESH_MS);
}

async function createSession(ev: SubmitEvent): Promise<void> {
  ev.preventDefault();
  if (!apiKey) return;
  const state = $('create-state');
  const btn = $<HTMLButtonElement>('create-button');
  const spec = {
    driver: $<HTMLSelectElement>('create-driver').value,
    resolution: {
      width: Number($<HTMLInputElement>('create-width').value),
      height: Number($<HTMLInputElement>('create-height').value),
    },
  };
  btn.disabled = true;
  state.className = 'muted';
  state.textContent = 'Starting a sandbox…';
  try {
    const s = await call<Session>('POST', '/v1/sessions', { key: apiKey, body: spec });
    state.textContent = `Created ${s.id}.`;
  } catch (err) {
    if (handleAuthFailure(err)) return;
    state.className = 'error';
    state.textContent = 'Create failed: ' + describe(err);
  } finally {
    btn.disabled = false;
  }
  await refresh();
}

// Mints a `control` token (the session's live_view_url only watches) and opens the live view
// with it. The tab opens at the click, so no popup blocker stops it, and gets its address once
// the token is there.
async function openControl(id: string): Promise<void> {
  if (!apiKey) return;
  const tab = window.open('', '_blank');
  if (tab) tab.opener = null;
  try {
    const t = await call<{ token: string }>('POST', `/v1/sessions/${encodeURIComponent(id)}/tokens`,
                                            { key: apiKey, body: { scope: 'control', ttl_s: 3600 } });
    const url = `/v1/sessions/${encodeURIComponent(id)}/live?token=${encodeURIComponent(t.token)}`;
    if (tab) tab.location.href = url;
    else window.location.href = url;
  } catch (err) {
    tab?.close();
    if (handleAuthFailure(err)) return;
    setListState(`Cannot open a control link for ${id}: ` + describe(err));
  }
}

async function deleteSession(id: string): Promise<void> {
  if (!apiKey || !window.confirm(`End session ${id}? Its sandbox and everything in it go away.`)) {
    return;
  }
  try {
    await call<Session>('DELETE', `/v1/sessions/${encodeURIComponent(id)}`, { key: apiKey });
    setListState(`Deleted ${id}.`);
  } catch (err) {
    if (handleAuthFailure(err)) return;
    setListState(`Delete of ${id} failed: ` + describe(err));
  }
  await refresh();
}

$('sign-in-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = $<HTMLInputElement>('api-key');
  const key = input.value.trim();
  input.value = '';
  if (key) void signIn(key);
});
$('sign-out').addEventListener('click', () => {
  sessionStorage.removeItem(KEY_STORAGE);
  apiKey = null;
  pruneThumbnails(new Set());
  rows.clear();
  $('sessions-body').replaceChildren();
  $('logs-panel').hidden = true;
  showSignIn();
});
$<HTMLInputElement>('show-thumbnails').checked = thumbnailsOn();
$('show-thumbnails').addEventListener('change', () => {
  sessionStorage.setItem(THUMBS_STORAGE,
                         $<HTMLInputElement>('show-thumbnails').checked ? 'on' : 'off');
  void refresh();
});
$('logs-close').addEventListener('click', () => {
  $('logs-panel').hidden = true;
  logsOf = '';
});
$('logs-refresh').addEventListener('click', () => void (logsOf && showLogs(logsOf)));
$('logs-noise').addEventListener('change', () => {
  $('logs-body').classList.toggle('show-noise', $<HTMLInputElement>('logs-noise').checked);
  if (logsOf) renderLogs(shownLogs.lines, shownLogs.live);
});
$('create-driver').addEventListener('change', driverHint);
$('create-form').addEventListener('submit', (ev) => void createSession(ev as SubmitEvent));
$('refresh').addEventListener('click', () => void refresh());
$('show-ended').addEventListener('change', () => void refresh());

if (apiKey) void signIn(apiKey);
else showSignIn();
