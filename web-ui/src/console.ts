// The console at /: sign in with an API key, list, create and delete sessions, watch each one's
// screen in a thumbnail, read its logs, copy its URLs and open its live view. The key lives in
// sessionStorage (this tab only) and goes to cabind as Authorization: Bearer on every call;
// nothing here works without it.
import { $, ApiError, call, type Info, type Session } from './api';

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

function fillDrivers(i: Info): void {
  const select = $<HTMLSelectElement>('create-driver');
  select.replaceChildren();
  for (const d of i.drivers) {
    const opt = document.createElement('option');
    opt.value = d.name;
    opt.textContent = d.available ? `${d.name} (${d.detail})` : `${d.name} (unavailable)`;
    opt.disabled = !d.available;
    opt.selected = d.name === i.default_driver;
    select.append(opt);
  }
  for (const id of ['create-width', 'create-height']) {
    const input = $<HTMLInputElement>(id);
    input.min = String(i.limits.resolution_min);
    input.max = String(i.limits.resolution_max);
  }
}

function when(iso: string | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
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
function thumbnail(s: Session): HTMLElement {
  const td = document.createElement('td');
  td.className = 'thumb';
  if (s.status !== 'running' || !s.live_view_url || !thumbnailsOn()) return td;
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

async function showLogs(id: string): Promise<void> {
  if (!apiKey) return;
  const panel = $('logs-panel');
  $('logs-title').textContent = `Logs of ${id}`;
  $('logs-body').textContent = 'Loading…';
  panel.hidden = false;
  try {
    const r = await call<{ lines: string[]; live: boolean }>(
      'GET', `/v1/sessions/${encodeURIComponent(id)}/logs`, { key: apiKey });
    $('logs-body').textContent = r.lines.length ? r.lines.join('\n') : '(no output yet)';
  } catch (err) {
    if (handleAuthFailure(err)) return;
    $('logs-body').textContent = 'Cannot read the logs: ' + describe(err);
  }
}

function copyButton(what: string, text: string, id: string, className: string): HTMLButtonElement {
  const b = button(`Copy ${what}`, () => {
    copyText(text).then(
      () => setListState(`Copied the ${what} of ${id}.`),
      (err) => setListState('Copy failed: ' + describe(err)),
    );
  });
  b.classList.add('copy', className);
  return b;
}

function sessionRow(s: Session): HTMLTableRowElement {
  const tr = document.createElement('tr');
  tr.dataset.id = s.id;
  tr.append(thumbnail(s));
  const cells = [
    s.id,
    s.end_reason ? `${s.status} (${s.end_reason})` : s.status,
    s.driver,
    `${s.resolution.width}×${s.resolution.height}`,
    when(s.created_at),
    when(s.ended_at ?? s.expires_at),
  ];
  cells.forEach((text, i) => {
    const td = document.createElement('td');
    td.textContent = text;
    if (i === 0) td.className = 'mono';
    if (i === 1) td.className = 'status';
    if (i === 2) td.className = 'driver';
    tr.append(td);
  });
  const actions = document.createElement('td');
  actions.className = 'actions';
  if (s.live_view_url) {
    const a = document.createElement('a');
    a.className = 'button live-link';
    a.href = s.live_view_url;
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    a.textContent = 'Live view';
    actions.append(a);
  }
  if (s.status === 'running') {
    const c = button('Take over', () => void openControl(s.id));
    c.classList.add('control-link');
    c.title = 'Open the live view with a control link: watch, type and point';
    actions.append(c);
  }
  actions.append(copyButton('ID', s.id, s.id, 'copy-id'));
  if (s.cdp_url) actions.append(copyButton('CDP URL', s.cdp_url, s.id, 'copy-cdp'));
  if (s.live_view_url) {
    actions.append(copyButton('live view URL', s.live_view_url, s.id, 'copy-live'));
  }
  if (s.vnc_url) actions.append(copyButton('VNC URL', s.vnc_url, s.id, 'copy-vnc'));
  actions.append(button('Logs', () => void showLogs(s.id), 'logs'));
  if (s.status === 'running') {
    actions.append(button('Delete', () => void deleteSession(s.id), 'danger delete'));
  }
  tr.append(actions);
  return tr;
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
    $('sessions-body').replaceChildren(...r.sessions.map(sessionRow));
    $('sessions-empty').hidden = r.sessions.length > 0;
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
});
$('create-form').addEventListener('submit', (ev) => void createSession(ev as SubmitEvent));
$('refresh').addEventListener('click', () => void refresh());
$('show-ended').addEventListener('change', () => void refresh());

if (apiKey) void signIn(apiKey);
else showSignIn();
