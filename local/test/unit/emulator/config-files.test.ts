import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadFaultsFile } from '#local/emulator/faults';
import { EmulatorConfigError, startEmulator } from '#local/emulator/server';
import { loadStateFile } from '#local/emulator/state';

let directory: string;

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'svc-emulator-config-'));
});

afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

async function fileWith(name: string, content: unknown): Promise<string> {
  const path = join(directory, name);
  await writeFile(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

async function loadError(load: () => Promise<unknown>): Promise<EmulatorConfigError> {
  try {
    await load();
  } catch (error) {
    if (error instanceof EmulatorConfigError) return error;
    throw error;
  }
  throw new Error('expected the file to be refused');
}

describe('loadStateFile', () => {
  it('accepts the sample state shipped with the emulator', async () => {
    // Act
    const state = await loadStateFile('local/emulator/sample-state.json');

    // Assess
    expect(state.users?.length).toBeGreaterThanOrEqual(3);
    expect(state.conversations).toHaveLength(2);
    expect(state.comments?.some((comment) => comment.parent_id)).toBe(true);
    expect(new Set(state.votes?.map((vote) => vote.value))).toEqual(new Set(['like', 'dislike']));
  });

  it('names the file, the field path, the rule and the fix for a bad user_name', async () => {
    // Prepare
    const path = await fileWith('short-name.json', { users: [{ primary_key: 'u-1', user_name: 'ab' }] });

    // Act
    const error = await loadError(() => loadStateFile(path));

    // Assess
    expect(error.message).toContain(path);
    expect(error.message).toContain(
      'users[0].user_name: must be longer than 3 and shorter than 30 characters',
    );
    expect(error.message).toMatch(/Fix the fields listed above/);
    expect(error.message).toContain('docs/emulator.md');
  });

  it('lists every bad field, including unknown keys with the allowed ones', async () => {
    // Prepare
    const path = await fileWith('many.json', {
      spot: 'sp_x',
      users: [
        { primary_key: 'u-1', user_name: 'good_name', role: 'owner', bio: 'b'.repeat(201), nickname: 'x' },
      ],
      votes: [{ primary_key: 'u-1', comment_id: 'c-1', value: 'love' }],
    });

    // Act
    const error = await loadError(() => loadStateFile(path));

    // Assess
    expect(error.problems.map((problem) => problem.field).sort()).toEqual(
      ['spot', 'users[0].bio', 'users[0].nickname', 'users[0].role', 'votes[0].value'].sort(),
    );
    expect(error.message).toContain(
      'spot: unknown field; allowed: spot_id, conversations, users, comments, votes',
    );
    expect(error.message).toContain('users[0].role: must be one of admin, moderator');
    expect(error.message).toContain('votes[0].value: must be like or dislike');
  });

  it('checks cross references between comments, users, conversations and votes', async () => {
    // Prepare
    const path = await fileWith('refs.json', {
      conversations: [{ id: 'k', url: 'https://x.example', title: 'X' }],
      users: [{ primary_key: 'u-1', user_name: 'user_one' }],
      comments: [
        { id: 'c-1', primary_key: 'u-9', conversation_id: 'k', text: 'a', written_at: 1 },
        {
          id: 'c-2',
          primary_key: 'u-1',
          conversation_id: 'nope',
          text: 'b',
          written_at: 2,
          parent_id: 'c-404',
        },
      ],
      votes: [{ primary_key: 'u-1', comment_id: 'c-404', value: 'like' }],
    });

    // Act
    const error = await loadError(() => loadStateFile(path));

    // Assess
    expect(error.problems.map((problem) => problem.field)).toEqual([
      'comments[0].primary_key',
      'comments[1].conversation_id',
      'comments[1].parent_id',
      'votes[0].comment_id',
    ]);
  });

  it('refuses duplicate primary keys and user names', async () => {
    // Prepare
    const path = await fileWith('dupes.json', {
      users: [
        { primary_key: 'u-1', user_name: 'same_name' },
        { primary_key: 'u-1', user_name: 'SAME_NAME' },
      ],
    });

    // Act
    const error = await loadError(() => loadStateFile(path));

    // Assess
    expect(error.problems.map((problem) => problem.field)).toEqual([
      'users[1].primary_key',
      'users[1].user_name',
    ]);
  });

  it('applies the API field rules to state users', async () => {
    // Prepare
    const path = await fileWith('rules.json', {
      users: [
        {
          primary_key: 'u-1',
          user_name: 'has space',
          display_name: 'd'.repeat(31),
          user_metadata: 'bm9wZQ==',
          settings: { notifications: { email: { user_mentioned: 'later' } } },
        },
      ],
    });

    // Act
    const error = await loadError(() => loadStateFile(path));

    // Assess
    expect(error.problems.map((problem) => problem.field)).toEqual([
      'users[0].user_name',
      'users[0].display_name',
      'users[0].user_metadata',
      'users[0].settings.notifications.email.user_mentioned',
    ]);
  });

  it('says when the file is not JSON or cannot be read', async () => {
    // Prepare
    const broken = await fileWith('broken.json', '{"users": [');
    const absent = join(directory, 'absent.json');

    // Act
    const notJson = await loadError(() => loadStateFile(broken));
    const unreadable = await loadError(() => loadStateFile(absent));

    // Assess
    expect(notJson.message).toContain(`${broken} is not valid JSON`);
    expect(unreadable.message).toContain(`Cannot read Emulator state file ${absent}`);
  });

  it('makes startEmulator refuse an invalid state object', async () => {
    // Act
    const outcome = startEmulator({ state: { users: [{ primary_key: 'u', user_name: 'x' }] } });

    // Assess
    await expect(outcome).rejects.toThrow(/users\[0\]\.user_name/);
  });
});

describe('loadFaultsFile', () => {
  it('accepts every documented key', async () => {
    // Prepare
    const profile = {
      seed: 7,
      error_rate: 0.2,
      errors: ['500', '503', '429', 'timeout', 'reset'],
      retry_after_seconds: 1,
      export_ready_after_polls: 2,
      export_failure_rate: 0.1,
      truncate_download_rate: 0.1,
      link_ttl_seconds: 5_184_000,
      timeout_ms: 1000,
      export_id_shape: 'data.id',
      export_padding_bytes: 1024,
      paths: ['/gdpr/'],
    };
    const path = await fileWith('faults.json', profile);

    // Act
    const loaded = await loadFaultsFile(path);

    // Assess
    expect(loaded).toEqual(profile);
  });

  it('names each bad key with what was expected', async () => {
    // Prepare
    const path = await fileWith('bad-faults.json', {
      error_rate: 1.5,
      errors: ['500', '404'],
      export_id_shape: 'uuid',
      paths: ['gdpr'],
      seed: 'seven',
      retries: 3,
    });

    // Act
    const error = await loadError(() => loadFaultsFile(path));

    // Assess
    expect(error.message).toContain(path);
    expect(error.message).toContain('error_rate: must be between 0 and 1');
    expect(error.message).toContain('errors[1]: must be one of 500, 502, 503, 429, timeout, reset');
    expect(error.message).toContain('export_id_shape: must be one of id_number, id_string');
    expect(error.message).toContain('paths[0]: must be a path prefix starting with /');
    expect(error.message).toContain('seed: must be a number');
    expect(error.message).toContain('retries: unknown field');
  });
});
