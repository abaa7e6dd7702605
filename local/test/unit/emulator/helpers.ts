import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import yauzl from 'yauzl';
import { z } from 'zod';
import type { EmulatorState } from '#local/emulator/state';

export const SSO_TOKEN = 'sso-token-Qm9vbGVhbiBsb2dpYw';
export const EXPORT_TOKEN = 'export-token-VGhlIHF1aWNrIGJyb3du';
export const SPOT_ID = 'sp_test';

/** A small platform: three users, two conversations, a thread with replies, likes and dislikes. */
export const TEST_STATE: EmulatorState = {
  spot_id: SPOT_ID,
  conversations: [
    { id: 'conv-a', url: 'https://site.example/a', title: 'Article A' },
    { id: 'conv-b', url: 'https://site.example/b', title: 'Article B' },
  ],
  users: [
    {
      primary_key: 'pk-alice',
      svc_user_id: 'u_alice',
      user_name: 'alice_w',
      display_name: 'Alice',
      email: 'alice@example.com',
      email_verified: true,
      bio: 'Reads everything.',
      role: 'moderator',
      location: 'Porto',
    },
    { primary_key: 'pk-bob', svc_user_id: 'u_bob', user_name: 'bobby', display_name: 'Bob' },
    { primary_key: 'pk-carol', svc_user_id: 'u_carol', user_name: 'carol_c', display_name: 'Carol' },
  ],
  comments: [
    {
      id: 'c-1',
      primary_key: 'pk-alice',
      conversation_id: 'conv-a',
      text: 'First!',
      written_at: 1_700_000_000,
    },
    {
      id: 'c-2',
      primary_key: 'pk-bob',
      conversation_id: 'conv-a',
      text: 'Reply to Alice',
      written_at: 1_700_000_100,
      parent_id: 'c-1',
    },
    {
      id: 'c-3',
      primary_key: 'pk-alice',
      conversation_id: 'conv-a',
      text: 'Reply to Bob',
      written_at: 1_700_000_200,
      parent_id: 'c-2',
    },
    {
      id: 'c-4',
      primary_key: 'pk-alice',
      conversation_id: 'conv-b',
      text: 'On B',
      written_at: 1_700_000_300,
    },
    {
      id: 'c-5',
      primary_key: 'pk-carol',
      conversation_id: 'conv-b',
      text: 'Carol on B',
      written_at: 1_700_000_400,
    },
  ],
  votes: [
    { primary_key: 'pk-alice', comment_id: 'c-2', value: 'like' },
    { primary_key: 'pk-alice', comment_id: 'c-5', value: 'dislike' },
    { primary_key: 'pk-bob', comment_id: 'c-1', value: 'like' },
    { primary_key: 'pk-carol', comment_id: 'c-1', value: 'dislike' },
    { primary_key: 'pk-carol', comment_id: 'c-4', value: 'like' },
  ],
};

export const testOptions = {
  state: TEST_STATE,
  ssoAccessToken: SSO_TOKEN,
  exportToken: EXPORT_TOKEN,
} as const;

export const ssoHeaders = { 'x-svc-sso-access-token': SSO_TOKEN };

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/** node:http, because fetch refuses a GET with a body and the spec sends one on register and update. */
export function rawRequest(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const headers = { ...init.headers };
    if (init.body !== undefined) headers['content-length'] = String(Buffer.byteLength(init.body));
    const outgoing = httpRequest(url, { method: init.method ?? 'GET', headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          text: Buffer.concat(chunks).toString(),
        }),
      );
      response.on('error', reject);
    });
    outgoing.on('error', reject);
    outgoing.end(init.body);
  });
}

export function query(values: Record<string, string>): string {
  return new URLSearchParams(values).toString();
}

export async function getJson(url: string, init?: RequestInit): Promise<{ status: number; body: unknown }> {
  const response = await fetch(url, init);
  const text = await response.text();
  return { status: response.status, body: text === '' ? undefined : JSON.parse(text) };
}

export function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
  return getJson(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

export function putJson(url: string, body: unknown) {
  return getJson(url, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

export const errorBodySchema = z.object({
  success: z.literal(false),
  error: z.object({ code: z.string(), message: z.string(), field: z.string().optional() }),
});

export const retrievalSchema = z.object({
  success: z.literal(true),
  user: z.object({ primary_key: z.string(), svc_user_id: z.string(), user_name: z.string() }).passthrough(),
});

const statusSchema = z.object({ status: z.string(), link: z.string().optional() });

/** Starts an export and polls it until it has a link; returns the export id and the link. */
export async function exportUntilLink(
  url: string,
  userId: string,
  maxPolls = 10,
): Promise<{ id: string; link: string; polls: number }> {
  const started = await postJson(`${url}/gdpr/export`, {
    access_token: EXPORT_TOKEN,
    spot_id: SPOT_ID,
    user_id: userId,
  });
  const id = String(z.object({ id: z.union([z.number(), z.string()]) }).parse(started.body).id);
  for (let poll = 1; poll <= maxPolls; poll += 1) {
    const status = await getJson(
      `${url}/gdpr/export/status/${id}?${query({ access_token: EXPORT_TOKEN, spot_id: SPOT_ID })}`,
    );
    const parsed = statusSchema.parse(status.body);
    if (parsed.status === 'completed' && parsed.link) return { id, link: parsed.link, polls: poll };
  }
  throw new Error(`export ${id} did not complete within ${maxPolls} polls`);
}

export interface ZipEntryContent {
  data: Buffer;
  compressionMethod: number;
  crc32: number;
}

/** Reads every entry of a zip held in memory. */
export async function unzip(buffer: Buffer): Promise<Map<string, ZipEntryContent>> {
  const zipfile = await yauzl.fromBufferPromise(buffer, { lazyEntries: true });
  const entries = new Map<string, ZipEntryContent>();
  for await (const entry of zipfile.eachEntry()) {
    const stream = await zipfile.openReadStreamPromise(entry);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(Buffer.from(chunk));
    entries.set(entry.fileName, {
      data: Buffer.concat(chunks),
      compressionMethod: entry.compressionMethod,
      crc32: entry.crc32,
    });
  }
  return entries;
}

export function entryJson(entries: Map<string, ZipEntryContent>, name: string): unknown {
  const entry = entries.get(name);
  if (!entry) throw new Error(`zip has no ${name}`);
  return JSON.parse(entry.data.toString('utf8'));
}
