import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { collectActivity } from '../../../../../lambdas/build-package/activity.ts';
import { PlatformCapacityError } from '../../../../../lambdas/shared/errors.ts';
import { PlatformClient } from '../../../../../lambdas/shared/platform-client.ts';
import { type RunningEmulator, startEmulator } from '../../../../emulator/server.ts';

const SSO_TOKEN = 'emu-sso-token-activity-1';
const EXPORT_TOKEN = 'emu-export-token-activity-2';
const COMMENTS = 230;

let emulator: RunningEmulator;
const logLines: string[] = [];
const sleeps: number[] = [];
const options = {
  pageSize: 100,
  backoffMs: 10,
  sleep: async (ms: number) => {
    sleeps.push(ms);
  },
};

function client() {
  return new PlatformClient(
    { baseUrl: emulator.url, exportUrl: emulator.url, activityUrl: emulator.url, spotId: emulator.spotId },
    {
      credentials: { exportToken: () => EXPORT_TOKEN },
      logger: {
        debug: (message, attributes) => logLines.push(JSON.stringify({ message, ...attributes })),
        warn: (message, attributes) => logLines.push(JSON.stringify({ message, ...attributes })),
      },
    },
  );
}

async function control(path: string, method: string, body?: unknown): Promise<void> {
  const response = await fetch(`${emulator.url}/_emulator/${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  expect(response.ok, `${method} /_emulator/${path}`).toBe(true);
}

beforeAll(async () => {
  emulator = await startEmulator({
    ssoAccessToken: SSO_TOKEN,
    exportToken: EXPORT_TOKEN,
    state: {
      spot_id: 'sp_emu',
      conversations: [
        { id: 'conv-even', url: 'https://news.example.test/even', title: 'Even numbers' },
        { id: 'conv-odd', url: 'javascript:alert(1)', title: 'Odd numbers' },
      ],
      users: [{ primary_key: 'subject-pk-1', user_name: 'subject_one', svc_user_id: 'svc-subject-1' }],
      comments: Array.from({ length: COMMENTS }, (_, index) => ({
        id: `c-${String(index).padStart(4, '0')}`,
        primary_key: 'subject-pk-1',
        conversation_id: index % 2 === 0 ? 'conv-even' : 'conv-odd',
        text: `comment ${index}`,
        written_at: 1_704_103_200 + index * 60,
      })),
      votes: [],
    },
  });
});
afterAll(async () => {
  await emulator.close();
});
beforeEach(async () => {
  await control('reset', 'POST');
  logLines.length = 0;
  sleeps.length = 0;
});

describe('collectActivity against the emulator', () => {
  it('reads every page across the cursor and joins titles, links and states', async () => {
    const { context, failure } = await collectActivity(client(), 'svc-subject-1', options);

    expect(failure).toBeNull();
    expect(context.details).toEqual({ status: 'complete', reason: null, pages: 3 });
    expect(context.messages.size).toBe(COMMENTS);
    expect(context.messages.get('c-0000')).toMatchObject({ deleted: false, published: true });
    expect(context.conversations.get('conv-even')).toEqual({
      title: 'Even numbers',
      url: 'https://news.example.test/even',
    });
    // A link the page must never carry is dropped; the title stays.
    expect(context.conversations.get('conv-odd')).toEqual({ title: 'Odd numbers', url: null });
  });

  it('stops at the page cap and says the context is partial', async () => {
    const { context, failure } = await collectActivity(client(), 'svc-subject-1', {
      ...options,
      maxPages: 2,
    });

    expect(failure).toBeNull();
    expect(context.details).toEqual({ status: 'partial', reason: null, pages: 2 });
    expect(context.messages.size).toBe(200);
  });

  it('starts no page past its read budget and says the context is partial', async () => {
    // Each page read moves the clock on by a minute; the budget ends after the first.
    let now = 0;
    const platform = client();
    const timed: Pick<typeof platform, 'userActivity'> = {
      userActivity: async (...args) => {
        const page = await platform.userActivity(...args);
        now += 60_000;
        return page;
      },
    };
    const { context, failure } = await collectActivity(timed, 'svc-subject-1', {
      ...options,
      clock: () => now,
      readUntil: 60_000,
    });

    expect(failure).toBeNull();
    expect(context.details).toEqual({ status: 'partial', reason: null, pages: 1 });
    expect(context.messages.size).toBe(100);
  });

  it('answers not_enabled, without retrying, when the account does not have the call', async () => {
    await control('activity', 'PUT', { enabled: false });

    const { context, failure } = await collectActivity(client(), 'svc-subject-1', options);

    expect(failure).toBe('ActivityNotEnabledError');
    expect(context.details).toEqual({ status: 'unavailable', reason: 'not_enabled', pages: 0 });
    expect(context.conversations.size).toBe(0);
    expect(sleeps).toEqual([]);
  });

  it('retries a failing platform, then answers unavailable with the error name and no token in the log', async () => {
    await control('faults', 'PUT', { seed: 7, error_rate: 1, errors: ['503'] });

    const { context, failure } = await collectActivity(client(), 'svc-subject-1', {
      ...options,
      attempts: 3,
    });

    expect(failure).toBe('PlatformUnavailableError');
    expect(context.details).toEqual({ status: 'unavailable', reason: 'unavailable', pages: 0 });
    expect(sleeps).toEqual([10, 20]);
    const log = logLines.join('\n');
    expect(log).not.toContain(EXPORT_TOKEN);
    expect(log).not.toContain('svc-subject-1');
  });

  it('answers no_user without a call when the subject has no platform id', async () => {
    const { context } = await collectActivity(client(), undefined, options);
    expect(context.details).toEqual({ status: 'unavailable', reason: 'no_user', pages: 0 });
  });

  it('lets a wait for platform capacity through, so the step waits instead of giving up', async () => {
    const waiting = {
      userActivity: async () => {
        throw new PlatformCapacityError('rate', 3);
      },
    };
    await expect(collectActivity(waiting, 'svc-subject-1', options)).rejects.toBeInstanceOf(
      PlatformCapacityError,
    );
  });
});

describe('collectActivity against answers the emulator does not give', () => {
  /** A platform client whose activity call answers `respond(offset)`. */
  function scripted(respond: (offset: number) => Response) {
    const offsets: number[] = [];
    const platform = new PlatformClient(
      {
        baseUrl: 'http://127.0.0.1:9/',
        exportUrl: 'http://127.0.0.1:9/',
        activityUrl: 'http://127.0.0.1:9/',
        spotId: 'sp_test',
      },
      {
        credentials: { exportToken: () => EXPORT_TOKEN },
        fetch: async (_url, init) => {
          const body: unknown = JSON.parse(String(init?.body));
          const offset =
            typeof body === 'object' && body !== null && 'offset' in body ? Number(body.offset) : -1;
          offsets.push(offset);
          return respond(offset);
        },
      },
    );
    return { platform, offsets };
  }
  const json = (status: number, body: unknown) =>
    new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

  it('answers refused for a 403 that does not say the call is disabled', async () => {
    const { platform } = scripted(() => json(403, { success: false, error: { code: 'forbidden' } }));
    const { context, failure } = await collectActivity(platform, 'svc-subject-1', options);
    expect(failure).toBe('PlatformAuthError');
    expect(context.details).toEqual({ status: 'unavailable', reason: 'refused', pages: 0 });
  });

  it('answers invalid_response, without retrying, for an answer without its documented shape', async () => {
    const { platform, offsets } = scripted(() => json(200, { cursor: { offset: 0 }, items: 'nope' }));
    const { context, failure } = await collectActivity(platform, 'svc-subject-1', options);
    expect(failure).toBe('PlatformResponseInvalidError');
    expect(context.details).toEqual({ status: 'unavailable', reason: 'invalid_response', pages: 0 });
    expect(offsets).toEqual([0]);
  });

  it('stops at a page that says more remain but returned nothing, instead of asking for ever', async () => {
    const { platform, offsets } = scripted((offset) =>
      json(200, { cursor: { offset, count: 0, has_next: true }, items: [], users: {} }),
    );
    const { context } = await collectActivity(platform, 'svc-subject-1', options);
    expect(offsets).toEqual([0]);
    expect(context.details).toEqual({ status: 'complete', reason: null, pages: 1 });
  });

  it('waits as long as a 429 asks (up to 20 s) before the next try', async () => {
    let calls = 0;
    const { platform } = scripted((offset) => {
      calls += 1;
      return calls === 1
        ? new Response('{}', { status: 429, headers: { 'retry-after': '7' } })
        : json(200, { cursor: { offset, count: 0, has_next: false }, items: [], users: {} });
    });
    const { failure } = await collectActivity(platform, 'svc-subject-1', options);
    expect(failure).toBeNull();
    expect(sleeps).toEqual([7000]);
  });
});

describe('the activity call and the platform gate', () => {
  it("is admitted by the gate but never moves its circuit: the activity service's outage holds no other call back", async () => {
    const events: string[] = [];
    const gate = {
      admit: async () => {
        events.push('admit');
      },
      report: async (outcome: 'up' | 'down') => {
        events.push(`report ${outcome}`);
      },
    };
    const answers = [503, 503, 200];
    const platform = new PlatformClient(
      {
        baseUrl: 'http://127.0.0.1:9/',
        exportUrl: 'http://127.0.0.1:9/',
        activityUrl: 'http://127.0.0.1:9/',
        spotId: 'sp',
      },
      {
        credentials: { exportToken: () => EXPORT_TOKEN, ssoAccessToken: () => 'sso' },
        gate,
        fetch: async (url) => {
          if (String(url).includes('/sso/v1/user/')) return new Response('{}', { status: 503 });
          const status = answers.shift() ?? 200;
          return new Response(
            status === 200
              ? JSON.stringify({ cursor: { offset: 0, count: 0, has_next: false }, items: [], users: {} })
              : '{}',
            { status },
          );
        },
      },
    );

    const { failure } = await collectActivity(platform, 'svc-subject-1', options);
    await expect(platform.retrieveUser('someone')).rejects.toThrow();

    expect(failure).toBeNull();
    // Three activity calls admitted, none reported; the retrieve call that failed is reported down.
    expect(events).toEqual(['admit', 'admit', 'admit', 'admit', 'report down']);
  });
});
