// A Computer for the OpenAI Agents SDK, backed by a Cabin session: each method is one action of
// OpenAI's computer-use vocabulary, which Cabin's /computer takes as it is.
//
//   import { Agent, computerTool } from '@openai/agents';
//   const computer = await CabinComputer.create({ resolution: { width: 1280, height: 800 } });
//   const agent = new Agent({ tools: [computerTool({ computer })], ... });
//   ...
//   await computer.close();
import type { Computer } from '@openai/agents-core';

type Json = Record<string, unknown>;
type Button = Parameters<Computer['click']>[2];

export class CabinComputer implements Computer {
  readonly environment = 'ubuntu' as const;
  readonly dimensions: [number, number];

  private constructor(private readonly base: string, private readonly key: string,
                      readonly sessionId: string, width: number, height: number) {
    this.dimensions = [width, height];
  }

  /** Creates a session (CABIN_URL, CABIN_API_KEY) and a Computer on it. */
  static async create(spec: Json = {}, base = process.env.CABIN_URL ?? 'http://127.0.0.1:8080',
                      key = process.env.CABIN_API_KEY ?? ''): Promise<CabinComputer> {
    const s = await CabinComputer.call(base, key, 'POST', '/v1/sessions', spec) as {
      id: string; resolution: { width: number; height: number };
      display?: { width: number; height: number } | null;
    };
    const size = s.display ?? s.resolution;
    return new CabinComputer(base, key, s.id, size.width, size.height);
  }

  private static async call(base: string, key: string, method: string, path: string,
                            body?: unknown): Promise<unknown> {
    const res = await fetch(base.replace(/\/+$/, '') + path, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  }

  private async act(action: Json): Promise<Json> {
    const answer = await CabinComputer.call(this.base, this.key, 'POST',
      `/v1/sessions/${this.sessionId}/computer`, action) as { results: Json[] };
    return answer.results[0] ?? {};
  }

  /** The screen as base64 PNG, at the session's display size. */
  async screenshot(): Promise<string> {
    return (await this.act({ type: 'screenshot' })).data as string;
  }

  async click(x: number, y: number, button: Button): Promise<void> {
    await this.act({ type: 'click', x, y, button });
  }

  async doubleClick(x: number, y: number): Promise<void> {
    await this.act({ type: 'double_click', x, y });
  }

  async scroll(x: number, y: number, scrollX: number, scrollY: number): Promise<void> {
    await this.act({ type: 'scroll', x, y, scroll_x: scrollX, scroll_y: scrollY });
  }

  async type(text: string): Promise<void> {
    await this.act({ type: 'type', text });
  }

  async wait(): Promise<void> {
    await this.act({ type: 'wait' });
  }

  async move(x: number, y: number): Promise<void> {
    await this.act({ type: 'move', x, y });
  }

  async keypress(keys: string[]): Promise<void> {
    await this.act({ type: 'keypress', keys });
  }

  async drag(path: [number, number][]): Promise<void> {
    await this.act({ type: 'drag', path: path.map(([x, y]) => ({ x, y })) });
  }

  /** Deletes the session. */
  async close(): Promise<void> {
    await CabinComputer.call(this.base, this.key, 'DELETE', `/v1/sessions/${this.sessionId}`);
  }
}
