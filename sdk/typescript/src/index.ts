// Cabin's TypeScript client: a thin facade over the HTTP API whose types are generated from
// docs/openapi.json (src/schema.d.ts, `npm run generate`).
import type { components } from './schema.js';

export type Schemas = components['schemas'];
export type SessionCreate = Schemas['SessionCreate'];
export type SessionInfo = Schemas['Session'];
export type ExecRequest = Schemas['ExecRequest'];
export type ExecResult = Schemas['ExecResult'];
export type ComputerRequest = Schemas['ComputerRequest'];
export type ComputerAction = Schemas['ComputerAction'];
export type ComputerAnswer = Schemas['ComputerAnswer'];
export type Preview = Schemas['Preview'];
export type Token = Schemas['Token'];
export type ForkResult = Schemas['ForkResult'];
export type ErrorBody = Schemas['Error'];
export type FileList = Schemas['FileList'];
export type StoredFile = Schemas['StoredFile'];
export type Download = Schemas['Download'];
export type Control = Schemas['Control'];
export type SessionEvent = Schemas['Event'];

export interface CabinOptions {
  /** The server, e.g. `http://127.0.0.1:8080`; default `CABIN_URL`, then that address. */
  baseURL?: string;
  /** The admin key or a tenant key; default `CABIN_API_KEY`. */
  apiKey?: string;
  /** Retries of an answer that carries `Retry-After` (429, 503); default 2. */
  maxRetries?: number;
  /** Longest wait a `Retry-After` may ask for before the error is thrown instead; default 60 s. */
  maxRetryWaitMs?: number;
  /** Per request; default 5 minutes (a create may wait for room, a command may run long). */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/** An answer of the API with a status of 400 or more: the server's code and message. */
export class CabinError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;
  readonly retryAfterS: number | null;
  constructor(status: number, code: string, message: string, body: unknown, retryAfterS: number | null) {
    super(`${status} ${code}: ${message}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.body = body;
    this.retryAfterS = retryAfterS;
  }
}
export class BadRequestError extends CabinError {}
export class AuthenticationError extends CabinError {}
export class PermissionDeniedError extends CabinError {}
export class NotFoundError extends CabinError {}
export class ConflictError extends CabinError {}
export class UnprocessableEntityError extends CabinError {}
export class RateLimitError extends CabinError {}
export class InternalServerError extends CabinError {}
/** No answer came: the server could not be reached, or took longer than `timeoutMs`. */
export class APIConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'APIConnectionError';
  }
}

function errorFor(status: number, body: unknown, retryAfterS: number | null): CabinError {
  const e = (body as { error?: { code?: string; message?: string } } | null)?.error;
  const code = e?.code ?? `http_${status}`;
  const message = e?.message ?? '';
  const cls = status === 400 ? BadRequestError
    : status === 401 ? AuthenticationError
    : status === 403 ? PermissionDeniedError
    : status === 404 ? NotFoundError
    : status === 409 ? ConflictError
    : status === 422 ? UnprocessableEntityError
    : status === 429 ? RateLimitError
    : status >= 500 ? InternalServerError
    : CabinError;
  return new cls(status, code, message, body, retryAfterS);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Call {
  body?: unknown;
  /** Sent as it is (`application/octet-stream`) instead of JSON. */
  bytes?: Uint8Array | Blob;
  query?: Record<string, string | number | boolean | undefined>;
  headers?: Record<string, string>;
  raw?: boolean;
}

export class Cabin {
  readonly baseURL: string;
  readonly sessions: Sessions;
  private readonly apiKey: string;
  private readonly maxRetries: number;
  private readonly maxRetryWaitMs: number;
  private readonly timeoutMs: number;
  private readonly fetchImpl: typeof fetch;

  constructor(options: CabinOptions = {}) {
    const env = typeof process !== 'undefined' ? process.env : {};
    this.baseURL = (options.baseURL ?? env.CABIN_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    const key = options.apiKey ?? env.CABIN_API_KEY;
    if (!key) throw new Error('Cabin: no API key (pass apiKey, or set CABIN_API_KEY)');
    this.apiKey = key;
    this.maxRetries = options.maxRetries ?? 2;
    this.maxRetryWaitMs = options.maxRetryWaitMs ?? 60_000;
    this.timeoutMs = options.timeoutMs ?? 300_000;
    this.fetchImpl = options.fetch ?? fetch;
    this.sessions = new Sessions(this);
  }

  /** Server-Sent Events from `path`, parsed: each `data:` line's JSON, until the stream ends. */
  async *eventStream<T>(path: string, options: { since?: number; signal?: AbortSignal } = {})
    : AsyncGenerator<T> {
    const url = new URL(this.baseURL + path);
    if (options.since !== undefined) url.searchParams.set('since', String(options.since));
    let res: Response;
    try {
      res = await this.fetchImpl(url, {
        headers: { authorization: `Bearer ${this.apiKey}`, accept: 'text/event-stream' },
        signal: options.signal,
      });
    } catch (err) {
      throw new APIConnectionError(`GET ${path}: ${(err as Error).message}`, { cause: err });
    }
    if (!res.ok || !res.body) {
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // not JSON: the text stands
      }
      throw errorFor(res.status, body, null);
    }
    const decoder = new TextDecoder();
    let buf = '';
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += decoder.decode(chunk, { stream: true });
        let end: number;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          for (const line of block.split('\n')) {
            if (line.startsWith('data: ')) yield JSON.parse(line.slice(6)) as T;
          }
        }
      }
    } catch (err) {
      if (options.signal?.aborted) return;
      throw err;
    }
  }

  /** One request to the API; JSON in and out (`raw`: the bytes). Throws CabinError. */
  async request<T>(method: string, path: string, call: Call = {}): Promise<T> {
    const url = new URL(this.baseURL + path);
    for (const [k, v] of Object.entries(call.query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.apiKey}`, ...(call.headers ?? {}),
    };
    let payload: BodyInit | undefined;
    if (call.bytes !== undefined) {
      headers['content-type'] = 'application/octet-stream';
      payload = call.bytes as BodyInit;
    } else if (call.body !== undefined) {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(call.body);
    }
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.fetchImpl(url, {
          method, headers, body: payload, signal: AbortSignal.timeout(this.timeoutMs),
        });
      } catch (err) {
        throw new APIConnectionError(`${method} ${path}: ${(err as Error).message}`, { cause: err });
      }
      if (res.ok) {
        if (call.raw) return new Uint8Array(await res.arrayBuffer()) as T;
        const text = await res.text();
        return (text ? JSON.parse(text) : undefined) as T;
      }
      const text = await res.text();
      let body: unknown = null;
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
      // The server says when to come back only where nothing was done (a quota, a rate, no
      // room, a drain): then asking again is safe, for a create too.
      const header = res.headers.get('retry-after');
      const retryAfterS = header !== null && /^\d+$/.test(header) ? Number(header) : null;
      if (retryAfterS !== null && attempt < this.maxRetries &&
          retryAfterS * 1000 <= this.maxRetryWaitMs) {
        await sleep(retryAfterS * 1000);
        continue;
      }
      throw errorFor(res.status, body, retryAfterS);
    }
  }
}

export class Sessions {
  constructor(private readonly cabin: Cabin) {}

  /** Creates a session and answers once it is ready (`wait_until`). Dispose it to delete it. */
  async create(spec: SessionCreate = {}, options: { idempotencyKey?: string } = {}): Promise<Session> {
    const headers = options.idempotencyKey ? { 'idempotency-key': options.idempotencyKey } : undefined;
    const info = await this.cabin.request<SessionInfo>('POST', '/v1/sessions', { body: spec, headers });
    return new Session(this.cabin, info);
  }

  /** Live sessions (`all`: ended ones too). */
  async list(options: { all?: boolean } = {}): Promise<SessionInfo[]> {
    const r = await this.cabin.request<Schemas['SessionList']>('GET', '/v1/sessions', {
      query: { all: options.all ? 1 : undefined },
    });
    return r.sessions;
  }

  async get(id: string): Promise<Session> {
    return new Session(this.cabin, await this.cabin.request<SessionInfo>('GET', `/v1/sessions/${id}`));
  }

  async delete(id: string): Promise<SessionInfo> {
    return this.cabin.request<SessionInfo>('DELETE', `/v1/sessions/${id}`);
  }
}

/** One session: its record as last read, and what can be done with it. */
export class Session implements AsyncDisposable {
  readonly id: string;
  info: SessionInfo;
  readonly previews: Previews;
  readonly files: Files;

  constructor(private readonly cabin: Cabin, info: SessionInfo) {
    this.id = info.id;
    this.info = info;
    this.previews = new Previews(cabin, this.path);
    this.files = new Files(cabin, this.path);
  }

  private get path(): string {
    return `/v1/sessions/${this.id}`;
  }

  /** The CDP WebSocket URL (with a capability token) for Playwright, Puppeteer or any client. */
  get cdpUrl(): string {
    if (!this.info.cdp_url) throw new Error(`session ${this.id} has no CDP URL (${this.info.status})`);
    return this.info.cdp_url;
  }

  /** A link that lets whoever holds it watch the screen in a browser. */
  get liveViewUrl(): string | undefined {
    return this.info.live_view_url ?? undefined;
  }

  async refresh(): Promise<SessionInfo> {
    this.info = await this.cabin.request<SessionInfo>('GET', this.path);
    return this.info;
  }

  /** Ends the session; its sandbox and everything in it are gone. */
  async delete(): Promise<SessionInfo> {
    this.info = await this.cabin.request<SessionInfo>('DELETE', this.path);
    return this.info;
  }

  /** `await using s = await cabin.sessions.create()`: the session ends with the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (err) {
      // Already gone (ended on its own, or deleted in the block): nothing to undo.
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  /** Playwright's browser over this session's CDP URL (needs `playwright-core`). */
  async connectPlaywright(): Promise<import('playwright-core').Browser> {
    const { chromium } = await import('playwright-core');
    return chromium.connectOverCDP(this.cdpUrl);
  }

  /** One action or a batch, in Anthropic's, OpenAI's or Cabin's vocabulary. */
  async computer(actions: ComputerAction | ComputerAction[] | ComputerRequest): Promise<ComputerAnswer> {
    const body = Array.isArray(actions) ? { actions } : actions;
    return this.cabin.request<ComputerAnswer>('POST', `${this.path}/computer`, { body });
  }

  /** The screen as PNG (or JPEG) bytes. */
  async screenshot(options: { format?: 'png' | 'jpeg'; quality?: number } = {}): Promise<Uint8Array> {
    return this.cabin.request<Uint8Array>('GET', `${this.path}/screenshot`, {
      query: options, raw: true,
    });
  }

  /** Runs a command in the sandbox: `exec(['ls', '-l'])` or `exec({argv, stdin, ...})`. */
  async exec(command: string[] | ExecRequest): Promise<ExecResult> {
    const body = Array.isArray(command) ? { argv: command } : command;
    return this.cabin.request<ExecResult>('POST', `${this.path}/exec`, { body });
  }

  /** Freezes the sandbox (`hibernate`: to disk, where the driver can). */
  async pause(mode?: 'freeze' | 'hibernate'): Promise<SessionInfo> {
    this.info = await this.cabin.request<SessionInfo>('POST', `${this.path}/pause`, {
      body: mode ? { mode } : {},
    });
    return this.info;
  }

  async resume(): Promise<SessionInfo> {
    this.info = await this.cabin.request<SessionInfo>('POST', `${this.path}/resume`, { body: {} });
    return this.info;
  }

  /** The idle time starts again. */
  async keepalive(): Promise<SessionInfo> {
    this.info = await this.cabin.request<SessionInfo>('POST', `${this.path}/keepalive`, { body: {} });
    return this.info;
  }

  /** Sessions that continue from this one's browser. */
  async fork(count = 1): Promise<Session[]> {
    const r = await this.cabin.request<ForkResult>('POST', `${this.path}/fork`, { body: { count } });
    return r.sessions.map((info) => new Session(this.cabin, info as SessionInfo));
  }

  /** What the browser downloaded, oldest first; read one with `files.read(d.path)`. */
  async downloads(): Promise<Download[]> {
    return (await this.cabin.request<{ downloads: Download[] }>('GET', `${this.path}/downloads`)).downloads;
  }

  /** The sandbox's clipboard text. */
  async getClipboard(): Promise<string> {
    return (await this.cabin.request<{ text: string }>('GET', `${this.path}/clipboard`)).text;
  }

  async setClipboard(text: string): Promise<void> {
    await this.cabin.request('PUT', `${this.path}/clipboard`, { body: { text } });
  }

  /** Takes the input lock: `/computer` input from others is refused until it is released. */
  async takeControl(ttlS?: number): Promise<Control> {
    return this.cabin.request<Control>('POST', `${this.path}/control`, {
      body: ttlS === undefined ? { action: 'take' } : { action: 'take', ttl_s: ttlS },
    });
  }

  async releaseControl(): Promise<Control> {
    return this.cabin.request<Control>('POST', `${this.path}/control`, { body: { action: 'release' } });
  }

  /**
   * The session's events as they happen (`since`: first the kept ones after that `seq`), until
   * the session ends or `signal` aborts: `for await (const e of s.events()) ...`.
   */
  events(options: { since?: number; signal?: AbortSignal } = {}): AsyncIterable<SessionEvent> {
    return this.cabin.eventStream(`${this.path}/events`, options);
  }

  /** A capability token (`cdp`, `view`, `control` or `preview:<port>`) with the URLs it opens. */
  async token(scope: string, ttlS?: number): Promise<Token> {
    return this.cabin.request<Token>('POST', `${this.path}/tokens`, {
      body: ttlS === undefined ? { scope } : { scope, ttl_s: ttlS },
    });
  }
}

/** The sandbox's files below its home directory and /tmp. */
export class Files {
  constructor(private readonly cabin: Cabin, private readonly path: string) {}

  /** Writes `data` to `path` (its directory must exist); the answer has its size and SHA-256. */
  async write(path: string, data: Uint8Array | Blob | string): Promise<StoredFile> {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    return this.cabin.request<StoredFile>('PUT', `${this.path}/files`, { query: { path }, bytes });
  }

  async read(path: string): Promise<Uint8Array> {
    return this.cabin.request<Uint8Array>('GET', `${this.path}/files`, { query: { path }, raw: true });
  }

  async list(dir: string): Promise<FileList['entries']> {
    return (await this.cabin.request<FileList>('GET', `${this.path}/files`, { query: { dir } })).entries;
  }

  async remove(path: string): Promise<void> {
    await this.cabin.request('DELETE', `${this.path}/files`, { query: { path } });
  }
}

export class Previews {
  constructor(private readonly cabin: Cabin, private readonly path: string) {}

  /** Opens `port` of the sandbox to the outside: a short-lived URL that carries its access. */
  async open(port: number, options: { ttlS?: number } = {}): Promise<Preview> {
    const body = options.ttlS === undefined ? { port } : { port, ttl_s: options.ttlS };
    return this.cabin.request<Preview>('POST', `${this.path}/previews`, { body });
  }

  async list(): Promise<Preview[]> {
    return (await this.cabin.request<Schemas['PreviewList']>('GET', `${this.path}/previews`)).previews;
  }

  async delete(id: string): Promise<void> {
    await this.cabin.request('DELETE', `${this.path}/previews/${id}`);
  }
}
