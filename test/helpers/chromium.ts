import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { z } from 'zod';

/** What to do when no browser is found: the test fails with this, it never skips. */
export const CHROMIUM_MISSING =
  "Debian's chromium is not installed (looked at $CHROMIUM_PATH, /usr/bin/chromium, /usr/bin/chromium-browser): install it with `apt-get update && apt-get install -y chromium` (.ci/run does this when it is missing), or set CHROMIUM_PATH";

/** The browser binary, or undefined. */
export function chromiumPath(): string | undefined {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  return candidates.find((path): path is string => path !== undefined && path !== '' && existsSync(path));
}

const messageSchema = z.looseObject({
  id: z.number().optional(),
  method: z.string().optional(),
  sessionId: z.string().optional(),
  result: z.record(z.string(), z.unknown()).optional(),
  params: z.record(z.string(), z.unknown()).optional(),
  error: z.looseObject({ message: z.string() }).optional(),
});

/** How a page was opened: JavaScript off unless asked, at a viewport size. */
export interface PageOptions {
  readonly javascript?: boolean;
  readonly width?: number;
  readonly height?: number;
  readonly timeoutMs?: number;
}

/** A page loaded in headless Chromium, driven over the DevTools protocol on a pipe. */
export interface LoadedPage {
  /** Navigation start to the load event, as this process saw it. */
  readonly loadMs: number;
  /** The DOM as the browser holds it after loading. */
  dom(): Promise<string>;
  /** A PNG of the whole page (not only the viewport) at `path`. */
  screenshot(path: string): Promise<void>;
  /** The renderer's counters: LayoutDuration, RecalcStyleDuration, ScriptDuration (seconds), Nodes, ... */
  metrics(): Promise<Record<string, number>>;
}

/**
 * Opens `url` in headless Chromium with a throwaway profile, no network beyond the file itself
 * (every host name resolves to nothing, nothing phones home), and, unless `javascript` is set,
 * scripts disabled through the DevTools protocol (Emulation.setScriptExecutionDisabled): Chromium
 * 156's headless mode ignores --disable-javascript, and --blink-settings=scriptEnabled=false
 * empties --dump-dom (both measured). Runs `use`, then closes the browser.
 */
export async function withPage<T>(
  url: string,
  options: PageOptions,
  use: (page: LoadedPage) => Promise<T>,
): Promise<T> {
  const binary = chromiumPath();
  if (binary === undefined) throw new Error(CHROMIUM_MISSING);
  const profile = await mkdtemp(join(tmpdir(), 'svc-dsr-chromium-'));
  const child = spawn(
    binary,
    [
      '--headless',
      '--disable-gpu',
      // Root has no sandbox to enter (containers, CI); elsewhere the sandbox stays on.
      ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
      `--user-data-dir=${profile}`,
      '--no-first-run',
      '--no-default-browser-check',
      '--disable-extensions',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-pings',
      '--host-resolver-rules=MAP * ~NOTFOUND',
      '--remote-debugging-pipe',
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] },
  );
  const cdp = new PipeClient(child, options.timeoutMs ?? 60_000);
  try {
    const { targetId } = z
      .object({ targetId: z.string() })
      .parse(await cdp.send('Target.createTarget', { url: 'about:blank' }));
    const { sessionId } = z
      .object({ sessionId: z.string() })
      .parse(await cdp.send('Target.attachToTarget', { targetId, flatten: true }));
    const session = (method: string, params: Record<string, unknown> = {}) =>
      cdp.send(method, params, sessionId);
    const width = options.width ?? 1280;
    const height = options.height ?? 900;
    await session('Page.enable');
    await session('Performance.enable');
    await session('Emulation.setScriptExecutionDisabled', { value: options.javascript !== true });
    await session('Emulation.setDeviceMetricsOverride', {
      width,
      height,
      deviceScaleFactor: 1,
      mobile: width < 600,
    });
    const loaded = cdp.event('Page.loadEventFired', sessionId);
    const started = performance.now();
    await session('Page.navigate', { url });
    await loaded;
    const loadMs = performance.now() - started;
    const page: LoadedPage = {
      loadMs,
      async dom() {
        const { root } = z
          .object({ root: z.object({ nodeId: z.number() }) })
          .parse(await session('DOM.getDocument', { depth: 0 }));
        return z
          .object({ outerHTML: z.string() })
          .parse(await session('DOM.getOuterHTML', { nodeId: root.nodeId })).outerHTML;
      },
      async screenshot(path) {
        // A viewport as tall as the page: content-visibility skips painting what is off screen, so a
        // capture beyond a short viewport would show the skipped sections blank.
        const contentHeight = async () =>
          Math.min(
            16_000,
            Math.ceil(
              z
                .object({ cssContentSize: z.object({ height: z.number() }) })
                .parse(await session('Page.getLayoutMetrics')).cssContentSize.height,
            ),
          );
        let tall = await contentHeight();
        for (let settled = false; !settled; ) {
          await session('Emulation.setDeviceMetricsOverride', {
            width,
            height: tall,
            deviceScaleFactor: 1,
            mobile: width < 600,
          });
          const measured = await contentHeight();
          settled = measured === tall;
          tall = measured;
        }
        const { data } = z
          .object({ data: z.string() })
          .parse(await session('Page.captureScreenshot', { format: 'png' }));
        await writeFile(path, Buffer.from(data, 'base64'));
      },
      async metrics() {
        const { metrics } = z
          .object({ metrics: z.array(z.object({ name: z.string(), value: z.number() })) })
          .parse(await session('Performance.getMetrics'));
        return Object.fromEntries(metrics.map(({ name, value }) => [name, value]));
      },
    };
    return await use(page);
  } finally {
    await cdp.close();
    await rm(profile, { recursive: true, force: true });
  }
}

/** The DevTools protocol over Chromium's pipe: NUL-terminated JSON, commands on fd 3, answers on fd 4. */
class PipeClient {
  #nextId = 1;
  readonly #pending = new Map<
    number,
    { resolve: (value: Record<string, unknown>) => void; reject: (error: Error) => void }
  >();
  readonly #waiters: { method: string; sessionId: string | undefined; resolve: () => void }[] = [];
  readonly #input: Writable;
  #buffer = '';
  #stderr = '';
  #exited: Promise<void>;

  constructor(
    private readonly child: ChildProcess,
    private readonly timeoutMs: number,
  ) {
    const input = child.stdio[3];
    const output = child.stdio[4];
    if (!isWritable(input) || !isReadable(output))
      throw new Error('Chromium did not open its debugging pipe');
    this.#input = input;
    output.on('data', (chunk: Buffer) => this.#receive(chunk.toString('utf8')));
    child.stderr?.on('data', (chunk: Buffer) => {
      this.#stderr = (this.#stderr + chunk.toString()).slice(-4000);
    });
    this.#exited = new Promise((resolve) => {
      child.on('exit', () => {
        for (const { reject } of this.#pending.values()) {
          reject(new Error(`Chromium exited; its last words: ${this.#stderr}`));
        }
        this.#pending.clear();
        resolve();
      });
    });
  }

  send(
    method: string,
    params: Record<string, unknown> = {},
    sessionId?: string,
  ): Promise<Record<string, unknown>> {
    const id = this.#nextId++;
    const message = JSON.stringify({ id, method, params, ...(sessionId === undefined ? {} : { sessionId }) });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`Chromium did not answer ${method} within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.#pending.set(id, {
        resolve: (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.#input.write(`${message}\0`);
    });
  }

  event(method: string, sessionId: string | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`Chromium sent no ${method} within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      this.#waiters.push({
        method,
        sessionId,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }

  async close(): Promise<void> {
    if (this.child.exitCode === null) {
      await Promise.race([this.send('Browser.close').catch(() => ({})), delay(5_000)]);
      await Promise.race([this.#exited, delay(5_000)]);
      if (this.child.exitCode === null && this.child.pid !== undefined) this.child.kill('SIGKILL');
    }
  }

  #receive(text: string): void {
    this.#buffer += text;
    for (let end = this.#buffer.indexOf('\0'); end !== -1; end = this.#buffer.indexOf('\0')) {
      const raw = this.#buffer.slice(0, end);
      this.#buffer = this.#buffer.slice(end + 1);
      const message = messageSchema.parse(JSON.parse(raw));
      if (message.id !== undefined) {
        const pending = this.#pending.get(message.id);
        this.#pending.delete(message.id);
        if (message.error !== undefined) pending?.reject(new Error(`Chromium: ${message.error.message}`));
        else pending?.resolve(message.result ?? {});
      } else if (message.method !== undefined) {
        const index = this.#waiters.findIndex(
          (waiter) => waiter.method === message.method && waiter.sessionId === message.sessionId,
        );
        if (index !== -1) this.#waiters.splice(index, 1)[0]?.resolve();
      }
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function isWritable(stream: unknown): stream is Writable {
  return typeof stream === 'object' && stream !== null && 'write' in stream;
}

function isReadable(stream: unknown): stream is Readable {
  return typeof stream === 'object' && stream !== null && 'on' in stream && 'read' in stream;
}

/** The text a reader sees in a dumped DOM: the body without tags, entities decoded, spaces collapsed. */
export function visibleText(dom: string): string {
  const body = /<body[^>]*>([\s\S]*)<\/body>/i.exec(dom)?.[1] ?? '';
  return body
    .replace(/<(script|style)[^>]*>[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&nbsp;/g, ' ')
    .replace(/&amp;/g, '&')
    .replace(/\s+/g, ' ')
    .trim();
}
