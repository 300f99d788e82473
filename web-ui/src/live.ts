// The live view at /v1/sessions/{id}/live?token=...: a noVNC viewer of the session's screen over
// /v1/sessions/{id}/vnc, scaled to the window. The page needs no API key: the `view` or `control`
// token in its URL is all it has, and cabind checks it again on every WebSocket it opens. Input
// is only sent while a `control` token holder has taken control (cabind drops it otherwise);
// taking it also takes the session's input lock, so an agent's input is refused meanwhile.
import RFB from '@novnc/novnc';

import { $, ApiError, call, type ControlLock, explainEndReason, type LiveStatus } from './api';

type State = 'connecting' | 'connected' | 'reconnecting' | 'paused' | 'ending' | 'error' | 'ended';

const MAX_BACKOFF_MS = 10000;
// How often a connected view asks whether the session was paused or resumed meanwhile: a paused
// sandbox sends no frames, so the picture alone cannot tell.
const STATUS_POLL_MS = 2000;
const PAUSED_TEXT = 'Paused: the session is frozen, and goes on where it was when resumed';
// While a session is ending cabind cannot say why yet: asked again this often until it can.
const ENDING_POLL_MS = 1000;
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
const access = $('access');

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

// What the page says over the screen once there is no screen to show.
function notice(title: string, detail = ''): void {
  $('notice-title').textContent = title;
  $('notice-detail').textContent = detail;
  $('notice-detail').hidden = !detail;
  $('notice').hidden = false;
}

interface Outcome {
  state: 'error' | 'ended' | 'ending';
  label: string; // the state line's few words
  title: string; // what the notice over the screen says
  detail?: string;
}

// No more reconnecting, nothing to control: the session ended or is ending, or the link does
// not work. An ending session is asked about again until cabind says how it ended.
function stop(o: Outcome): void {
  stopped = true;
  window.clearTimeout(retryTimer);
  setState(o.state, o.label);
  stateEl.title = o.detail ? `${o.title} ${o.detail}` : o.title;
  notice(o.title, o.detail);
  toggle.hidden = true;
  access.hidden = true;
  shot.disabled = true;
  if (rfb) {
    const r = rfb;
    rfb = null;
    r.disconnect();
  }
  if (o.state === 'ending') {
    window.clearTimeout(retryTimer);
    retryTimer = window.setTimeout(() => void awaitEnd(), ENDING_POLL_MS);
  }
}

const ENDING: Outcome = { state: 'ending', label: 'Ending…', title: 'The session is ending…',
                          detail: 'Its sandbox is being removed.' };

// Ended, with the session's end_reason when cabind gave it.
function ended(reason = '', status = ''): Outcome {
  const why = reason ? explainEndReason(reason) : '';
  let detail = reason ? `Reason: ${reason}${why ? ` (${why})` : ''}.` : undefined;
  if (!reason && status === 'failed') detail = 'It failed.';
  return { state: 'ended', label: 'Ended', title: 'This session has ended.', detail };
}

// Asks until the ending session has ended, then says how.
async function awaitEnd(): Promise<void> {
  try {
    const s = await call<LiveStatus>('GET', `/v1/sessions/${sessionId}/live/status`, { token });
    if (s.status === 'ended' || s.status === 'failed') {
      stop(ended('', s.status));
      return;
    }
  } catch (err) {
    if (err instanceof ApiError && err.status !== 0 && err.status < 500) {
      const o = explain(err);
      if (o.state !== 'ending') {
        stop(o);
        return;
      }
    }
  }
  retryTimer = window.setTimeout(() => void awaitEnd(), ENDING_POLL_MS);
}

function sentence(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1) + (s.endsWith('.') ? '' : '.');
}

// What a refused token or a gone session means to the person holding the link.
function explain(err: ApiError): Outcome {
  const error = (label: string, title: string, detail?: string): Outcome =>
    ({ state: 'error', label, title, detail });
  switch (err.code) {
    case 'token_expired':
      return error('Link expired', 'This live view link has expired.', 'Ask for a new one.');
    case 'token_revoked':
      return error('Link revoked', 'This live view link has been revoked.');
    case 'invalid_token':
      return error('Invalid link', 'This link is not valid for this session.',
                   sentence(err.message));
    case 'token_scope':
      return error('Wrong link', 'This link does not open the live view.', sentence(err.message));
    case 'unauthenticated':
      return error('No token', 'This link has no token.', 'Open the full live view link.');
    case 'session_not_found':
      return { state: 'ended', label: 'Ended', title: 'The session no longer exists.' };
    case 'session_ended': {
      // "the session ended: <end_reason>", or "the session is ending" before it has one.
      const m = /ended: (.+)$/.exec(err.message);
      return m ? ended(m[1]) : ENDING;
    }
    default:
      return error('Error', 'Cannot show this session.', `${sentence(err.message)} (${err.code})`);
  }
}

// Asks cabind what the token allows and whether the session still runs. Resolves null when the
// answer is final (an error state is shown); throws ApiError for a failure worth retrying.
async function checkToken(): Promise<LiveStatus | null> {
  try {
    const s = await call<LiveStatus>('GET', `/v1/sessions/${sessionId}/live/status`, { token });
    if (s.status === 'starting') throw new ApiError(503, 'starting', 'the session is starting');
    if (s.status !== 'running' && s.status !== 'paused') {
      stop(s.status === 'ending' ? ENDING : ended('', s.status));
      return null;
    }
    return s;
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    if (err.status === 0 || err.status >= 500) throw err;
    stop(explain(err));
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
    if (rfb === r) {
      stop({ state: 'error', label: 'Error', title: 'The screen asked for a password.',
             detail: 'Cabin never sets one.' });
    }
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
    stop({ state: 'error', label: 'Refused', title: 'The screen refused the connection.',
           detail: sentence(securityReason) });
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
    stop({ state: 'error', label: 'Error', title: 'This is not a live view address.' });
    return;
  }
  $('session-id').textContent = sessionId;
  if (!token) {
    stop({ state: 'error', label: 'No token', title: 'This link has no token.',
           detail: 'Open the full live view link.' });
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
  // A view link says so up front: its clicks and keys go nowhere.
  access.hidden = canControl;
  access.textContent = 'View only';
  access.title = 'This link can watch the screen, not type or point. A control link can.';
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
