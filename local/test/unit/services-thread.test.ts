import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient, ListTablesCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EmulatorConfigError } from '#local/emulator/server';
import { startLocalServices } from '#local/threads/services-thread';
import { createLedgerTable } from '../../../lambdas/shared/ledger/table.ts';

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

  it("collects the thread's garbage on request, answering with its heap in use, and refuses once the thread has ended", async () => {
    const services = await startLocalServices({
      emulator: { state: STATE, persistPath: join(dir, 'platform.json') },
      aws: { dynamoPath: join(dir, 'ledger') },
    });
    const { emulator, aws } = services;

    const heapUsed = await services.collectGarbage();
    const user = await fetch(`${emulator.url}/_emulator/users/thread-user`);
    await Promise.all([aws.close(), emulator.close()]);

    expect(heapUsed).toBeGreaterThan(1024 * 1024);
    expect(heapUsed).toBeLessThan(1024 * 1024 * 1024);
    expect(user.status).toBe(200);
    await expect(services.collectGarbage()).rejects.toThrow('the local services thread has ended');
  });

  it('serves the ledger stream on the thread and hands its records back, retrying a batch that failed', async () => {
    // Prepare
    const services = await startLocalServices({
      emulator: { state: STATE, persistPath: join(dir, 'platform.json') },
      aws: { dynamoPath: join(dir, 'ledger') },
      ledgerStream: { table: 'ledger' },
    });
    const stream = services.ledgerStream;
    if (stream === undefined) throw new Error('the thread should serve the ledger stream');
    const seen: string[] = [];
    let failures = 1;
    stream.consume(async (records) => {
      if (failures-- > 0) throw new Error('the consumer is not ready yet');
      for (const record of records) seen.push(String(record.dynamodb?.NewImage?.status?.S));
    });
    const direct = new DynamoDBClient(services.aws.clientConfig('dynamodb'));
    const dynamo = new DynamoDBClient({
      ...services.aws.clientConfig('dynamodb'),
      endpoint: stream.endpoint,
    });
    try {
      await createLedgerTable(direct, 'ledger');

      // Act
      await dynamo.send(
        new PutItemCommand({
          TableName: 'ledger',
          Item: { request_id: { S: 'thread-1' }, status: { S: 'received' } },
        }),
      );
      await stream.drained();

      // Assess: the failed hand-over was tried again, and drained() waited for it.
      expect(seen).toEqual(['received']);
    } finally {
      direct.destroy();
      dynamo.destroy();
      await Promise.all([services.aws.close(), services.emulator.close()]);
    }
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
