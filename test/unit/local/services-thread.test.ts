import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EmulatorConfigError } from '#local/emulator/server';
import { startLocalServices } from '#local/services-thread';

const STATE = {
  spot_id: 'sp_thread',
  conversations: [],
  users: [{ primary_key: 'thread-user', user_name: 'thread_user', svc_user_id: 'svc-thread' }],
  comments: [],
  votes: [],
};

describe('startLocalServices', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'svc-dsr-services-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('serves the emulator and the AWS stand-ins from another thread, and stops both on close', async () => {
    const services = await startLocalServices({
      emulator: { state: STATE, persistPath: join(dir, 'platform.json'), exportToken: 'export-token-1' },
      aws: { dynamoPath: join(dir, 'ledger') },
    });
    const { emulator, aws } = services;
    expect(emulator).toMatchObject({ spotId: 'sp_thread', exportToken: 'export-token-1' });

    const user = await fetch(`${emulator.url}/_emulator/users/thread-user`);
    expect(user.status).toBe(200);
    expect(await user.json()).toMatchObject({ user: { svc_user_id: 'svc-thread' } });
    const dynamo = new DynamoDBClient(aws.clientConfig('dynamodb'));
    expect(await dynamo.send(new ListTablesCommand({}))).toMatchObject({ TableNames: [] });
    dynamo.destroy();

    await Promise.all([aws.close(), emulator.close()]);
    // The emulator saved its state on close, from the other thread, where the data dir says.
    expect(JSON.parse(await readFile(join(dir, 'platform.json'), 'utf8'))).toMatchObject({
      spotId: 'sp_thread',
    });
    await expect(fetch(`${emulator.url}/_emulator/info`)).rejects.toThrow();
    await expect(fetch(`${aws.endpoints.dynamodb}/`)).rejects.toThrow();
    // Closing again is harmless.
    await aws.close();
  });

  it('reports an invalid platform state as an EmulatorConfigError naming the field', async () => {
    const started = startLocalServices({
      emulator: { state: { ...STATE, users: [{ user_name: 'no key' }] } as never },
      aws: {},
    });

    const error = await started.then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(EmulatorConfigError);
    expect((error as EmulatorConfigError).problems.map((problem) => problem.field).join(' ')).toContain(
      'users',
    );
  });
});
