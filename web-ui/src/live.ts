// The live view at /v1/sessions/{id}/live?token=...: a noVNC viewer of the session's screen over
// /v1/sessions/{id}/vnc, scaled to the window. The page needs no API key: the `view` or `control`
// token in its URL is all it has, and cabind checks it again on every WebSocket it opens. Input
// is only sent while a `control` token holder has taken control (cabind drops it otherwise);
// taking it also takes the session's input lock, so an agent's input is refused meanwhile.
import RFB from '@novnc/novnc';

import { $, ApiError, call, type ControlLock, type LiveStatus } from './api';

type State = 'connecting' | 'connected' | 'reconnecting' | 'paused' | 'error' | 'ended';

const MAX_BACKOFF_MS = 10000;
// How often a connected view asks whether the session was paused or resumed meanwhile: a paused
// sandbox sends no frames, so the picture alone cannot tell.
const STATUS_POLL_MS = 2000;
const PAUSED_TEXT = 'Paused: the session is frozen, and goes on where it was when resumed';
// The input lock is taken for this long, and taken again while control is held, so a page that
// vanished without releasing it (a crash, a lost network) frees it within this time.
const LOCK_TTL_S = 120;
const LOCK_RENEW_MS = 30000;
// What cabind calls a lock a live view took.
const LIVE_VIEW_HOLDER = 'live_view';

const match = /^\/v1\/sessions\/(ses_(?:[a-z0-9]{1,16}_)?[a-z0-9]{20})\/live\/?$/.exec(location.pathname);
const sessionId = match?.[1] ?? '';
const token = new URLSearchParams(location.search).get('token') ?? '';

const screen = $('screen');
const stateEl = $('conn-state');
const toggle = $<HTMLButtonElement>('control-toggle');
const shot = $<HTMLButtonElement>('screenshot');

let rfb: RFB | null = null;
let canControl = false;
let controlling = false;
let attempt = 0;
let lockRenewedAt = 0;
let retryTimer: number | undefined;
let stopped = false;

function setState(state: State, text: string): void {
  stateEl.dataset.state = state;
  stateEl.textContent = text;
  stateEl.title = text;
}

// A terminal state: no more reconnecting, nothing to control.
function stop(state: 'error' | 'ended', text: string): void {
  stopped = true;
  window.clearTimeout(retryTimer);
  setState(state, text);
  toggle.hidden = true;
  if (rfb) {
    const r = rfb;
    rfb = null;
    r.disconnect();
  }
}

function sentence(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1) + (s.endsWith('.') ? '' : '.');
}

// What a refused token or a gone session means to the person holding the link.
function explain(err: ApiError): { state: 'error' | 'ended'; text: string } {
  switch (err.code) {
    case 'token_expired':
      return { state: 'error', text: 'This live view link has expired. Ask for a new one.' };
    case 'token_revoked':
      return { state: 'error', text: 'This live view link has been revoked.' };
    case 'invalid_token':
      return { state: 'error', text: `This link is not valid for this session: ${err.message}.` };
    case 'token_scope':
      return { state: 'error', text: `This link does not open the live view: ${err.message}.` };
    case 'unauthenticated':
      return { state: 'error', text: 'This link has no token: open the full live view link.' };
    case 'session_not_found':
      return { state: 'ended', text: 'The session no longer exists.' };
    case 'session_ended':
      return { state: 'ended', text: sentence(err.message) };
    default:
      return { state: 'error', text: `Cannot show this session: ${err.message} (${err.code}).` };
  }
}

// Asks cabind what the token allows and whether the session still runs. Resolves null when the
// answer is final (an error state is shown); throws ApiError for a failure worth retrying.
async function checkToken(): Promise<LiveStatus | null> {
  try {
    const s = await call<LiveStatus>('GET', `/v1/sessions/${sessionId}/live/status`, { token });
    if (s.status === 'starting') throw new ApiError(503, 'starting', 'the session is starting');
    if (s.status !== 'running' && s.status !== 'paused') {
      stop('ended', `The session has ended (${s.status}).`);
      return null;
    }
    return s;
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    if (err.status === 0 || err.status >= 500) throw err;
    const e = explain(err);
    stop(e.state, e.text);
    return null;
  }
}

function applyControl(): void {
  if (rfb) {
    rfb.viewOnly = !controlling;
    rfb.focusOnClick = controlling;
    if (controlling) rfb.focus();
    else rfb.blur();
  }
  toggle.setAttribute('aria-pressed', String(controlling));
  toggle.textContent = controlling ? 'Release control' : 'Take control';
  screen.dataset.control = controlling ? 'on' : 'off';
}

function connect(): void {
  if (stopped) return;
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const url = `${scheme}//${location.host}/v1/sessions/${sessionId}/vnc?token=` +
              encodeURIComponent(token);
  setState(attempt === 0 ? 'connecting' : 'reconnecting',
           attempt === 0 ? 'Connecting…' : `Reconnecting (attempt ${attempt})…`);
  const r = new RFB(screen, url, { shared: true });
  rfb = r;
  r.scaleViewport = true;
  r.resizeSession = false;
  r.showDotCursor = true;
  applyControl();
  let securityReason = '';
  r.addEventListener('connect', () => {
    if (rfb !== r) return;
    // The lock went with the last controlling viewer when the connection dropped.
    if (controlling) void lock('take').catch(() => {});
    attempt = 0;
    shot.disabled = false;
    setState('connected', connectedText());
  });
  r.addEventListener('securityfailure', (ev) => {
    const d = (ev as CustomEvent<{ status: number; reason?: string }>).detail;
    securityReason = d.reason ?? `security failure ${d.status}`;
  });
  r.addEventListener('credentialsrequired', () => {
    if (rfb === r) stop('error', 'The screen asked for a password, which Cabin never sets.');
  });
  r.addEventListener('disconnect', () => {
    if (rfb !== r) return; // replaced or stopped on purpose
    rfb = null;
    shot.disabled = true;
    if (!stopped) void lost(securityReason);
  });
}

function connectedText(): string {
  return canControl && controlling ? 'Connected, in control' : 'Connected';
}

// Takes or releases the session's input lock with this page's token.
async function lock(action: 'take' | 'release'): Promise<ControlLock> {
  const body = action === 'take' ? { action, ttl_s: LOCK_TTL_S } : { action };
  const out = await call<ControlLock>('POST', `/v1/sessions/${sessionId}/control`, { token, body });
  if (action === 'take') lockRenewedAt = Date.now();
  return out;
}

async function takeControl(): Promise<void> {
  try {
    await lock('take');
  } catch (err) {
    controlling = false;
    applyControl();
    setState(stateEl.dataset.state === 'connected' ? 'connected' : 'error',
             `Could not take control: ${(err as Error).message}`);
    return;
  }
  controlling = true;
  applyControl();
  if (rfb && stateEl.dataset.state === 'connected') setState('connected', connectedText());
}

async function releaseControl(): Promise<void> {
  controlling = false;
  if (rfb) rfb.viewOnly = true;  // no more input from here, whatever the answer
  await lock('release').catch(() => {});  // expires on its own if this fails
  applyControl();
  if (rfb && stateEl.dataset.state === 'connected') setState('connected', connectedText());
}

// What the status says of the lock while this page is in control: renewed when due; if it is
// gone (expired, or someone else took it), input stops and the page says so.
async function keepLock(control: ControlLock | undefined): Promise<void> {
  if (!controlling || !control) return;
  if (!control.held || control.holder !== LIVE_VIEW_HOLDER) {
    controlling = false;
    applyControl();
    setState('connected', control.held
      ? `Connected; ${control.holder} took control`
      : 'Connected; control was released');
    return;
  }
  if (Date.now() - lockRenewedAt >= LOCK_RENEW_MS) await lock('take').catch(() => {});
}

// While connected: shows the session paused, or connected again once it runs.
async function watchStatus(): Promise<void> {
  while (!stopped) {
    await new Promise((r) => window.setTimeout(r, STATUS_POLL_MS));
    if (!rfb || stopped) continue;
    let s: LiveStatus | null = null;
    try {
      s = await checkToken();
    } catch {
      continue;  // the server is unreachable for a moment; the RFB connection says more
    }
    if (!s || !rfb) continue;
    const state = stateEl.dataset.state;
    if (s.status === 'paused' && state !== 'paused') setState('paused', PAUSED_TEXT);
    if (s.status === 'running' && state === 'paused') setState('connected', connectedText());
    await keepLock(s.control);
  }
}

// The connection dropped: find out why, then either say so or try again with backoff.
async function lost(securityReason: string): Promise<void> {
  setState('reconnecting', 'Connection lost; checking…');
  let status: LiveStatus | null = null;
  try {
    status = await checkToken();
    if (!status) return;
  } catch {
    // the server itself is unreachable: a network blip, retried below
  }
  if (securityReason && status) {
    stop('error', `The screen refused the connection: ${securityReason}.`);
    return;
  }
  if (status?.status === 'paused') {
    // Nothing to connect to until it is resumed: ask again in a while, without counting up.
    setState('paused', PAUSED_TEXT);
    window.clearTimeout(retryTimer);
    retryTimer = window.setTimeout(connect, STATUS_POLL_MS);
    return;
  }
  attempt += 1;
  const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** Math.min(attempt - 1, 5));
  setState('reconnecting',
           `Connection lost; reconnecting in ${Math.ceil(delay / 1000)} s (attempt ${attempt})…`);
  window.clearTimeout(retryTimer);
  retryTimer = window.setTimeout(connect, delay);
}

function screenshot(): void {
  if (!rfb) return;
  rfb.toBlob((blob) => {
    if (!blob) return;
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `${sessionId}-${new Date().toISOString().replace(/[:.]/g, '-')}.png`;
    document.body.append(a);
    a.click();
    a.remove();
    window.setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }, 'image/png');
}

async function start(): Promise<void> {
  if (!sessionId) {
    stop('error', 'This is not a live view address.');
    return;
  }
  $('session-id').textContent = sessionId;
  if (!token) {
    stop('error', 'This link has no token: open the full live view link.');
    return;
  }
  let status: LiveStatus | null = null;
  while (!status) {
    try {
      status = await checkToken();
      if (!status) return;
    } catch (err) {
      setState('reconnecting', `Cannot reach the server (${(err as Error).message}); retrying…`);
      await new Promise((r) => window.setTimeout(r, 2000));
    }
  }
  canControl = status.scope === 'control';
  toggle.hidden = !canControl;
  connect();
  void watchStatus();
}

toggle.addEventListener('click', () => {
  if (!canControl) return;
  void (controlling ? releaseControl() : takeControl());
});
// Leaving hands control back at once, rather than when the viewer's connection is noticed gone.
window.addEventListener('pagehide', () => {
  if (!controlling) return;
  void fetch(`/v1/sessions/${sessionId}/control?token=${encodeURIComponent(token)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ action: 'release' }),
    keepalive: true,
  }).catch(() => {});
});
shot.addEventListener('click', screenshot);
// Back online: retry now instead of waiting out the backoff.
window.addEventListener('online', () => {
  if (!stopped && !rfb) {
    window.clearTimeout(retryTimer);
    connect();
  }
});

void start();
