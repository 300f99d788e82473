// Calls to cabind's HTTP API from the pages it serves: same origin, JSON in and out, and every
// error turned into an ApiError carrying cabind's stable code and message.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface CallOptions {
  key?: string | null; // the API key, sent as Authorization: Bearer
  token?: string; // a capability token, sent as ?token=
  body?: unknown;
  signal?: AbortSignal;
}

export async function call<T>(method: string, path: string, opts: CallOptions = {}): Promise<T> {
  const headers: Record<string, string> = {};
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  let body: string | undefined;
  if (opts.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  let url = path;
  if (opts.token !== undefined) {
    url += (url.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(opts.token);
  }
  let res: Response;
  try {
    res = await fetch(url, { method, headers, body, signal: opts.signal, cache: 'no-store' });
  } catch (err) {
    throw new ApiError(0, 'network', `cannot reach the server (${(err as Error).message})`);
  }
  const text = await res.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: reported below
  }
  if (!res.ok) {
    const e = (json as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    const code = typeof e?.code === 'string' ? e.code : 'http_' + res.status;
    const message = typeof e?.message === 'string' ? e.message : `HTTP ${res.status}`;
    throw new ApiError(res.status, code, message);
  }
  if (json === null) throw new ApiError(res.status, 'bad_response', 'the server did not answer JSON');
  return json as T;
}

export interface Resolution {
  width: number;
  height: number;
}

export interface Session {
  id: string;
  status: string;
  driver: string;
  resolution: Resolution;
  start_url: string;
  created_at: string;
  expires_at: string;
  ended_at?: string;
  end_reason?: string;
  cdp_url?: string;
  live_view_url?: string;
  vnc_url?: string;
  json_version_url?: string;
}

export interface DriverInfo {
  name: string;
  isolation: string;
  detail: string;
  available: boolean;
  unavailable_reason?: string;
}

export interface Info {
  version: string;
  default_driver: string;
  drivers: DriverInfo[];
  sessions: { live: number; max: number };
  limits: { resolution_min: number; resolution_max: number };
}

// What GET /v1/sessions/{id}/live/status says about a live-view token.
// The session's input lock: who holds it, if anyone.
export interface ControlLock {
  held: boolean;
  holder: string | null;
  since: string | null;
  expires_at: string | null;
}

export interface LiveStatus {
  id: string;
  status: string;
  scope: 'view' | 'control';
  expires_at: string;
  resolution: Resolution;
  control?: ControlLock;
}

// What an end_reason means to a person (docs/operations.md lists them); '' for one not known
// here, whose own words then stand alone.
export function explainEndReason(reason: string): string {
  if (reason === 'timeout') return 'its lifetime ran out';
  if (reason === 'idle') return 'no one used it for its idle timeout';
  if (reason.startsWith('sandbox exited')) return 'its browser, display or sandbox died';
  if (reason.startsWith('sandbox lost')) return 'the sandbox was gone after a server restart';
  if (reason.startsWith('server restarted')) return 'the server restarted at a bad moment';
  return '';
}

// Finds an element the page template must have; a missing one is a build error, said loudly.
export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`page has no #${id}`);
  return el as T;
}
