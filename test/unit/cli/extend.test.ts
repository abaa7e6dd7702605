import { ConditionalCheckFailedException, DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { runExtend } from '../../../bin/cli/commands/extend.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { ledgerRecord, NOW, REQUEST_ID, storedItem, testContext } from './helpers.ts';

const dbMock = mockClient(DynamoDBDocumentClient);
/** The ledger reads through a plain DynamoDB client; the commands' own writes go through the DocumentClient. */
const ledgerMock = mockClient(DynamoDBClient);
// Operator actions are appended to the audit chain; an empty chain takes seq 0.
const s3Mock = mockClient(S3Client);

beforeEach(() => {
  s3Mock.reset();
  s3Mock.on(ListObjectsV2Command).resolves({});
  s3Mock.on(PutObjectCommand).resolves({});
  dbMock.reset();
  ledgerMock.reset();
});

describe('runExtend', () => {
  it('moves due_at to the statutory limit with a conditional update that allows one extension', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          regulation: 'ccpa',
          due_at: '2026-12-01T00:00:00.000Z',
          extension_limit_at: '2027-01-15T00:00:00.000Z',
        }),
      ),
    });
    dbMock.on(UpdateCommand).resolves({});
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runExtend(
      testContext(),
      { requestId: REQUEST_ID, reason: 'several accounts to search' },
      io,
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(dbMock).toHaveReceivedCommandWith(UpdateCommand, {
      TableName: 'ledger',
      Key: { request_id: REQUEST_ID },
      UpdateExpression:
        'SET #due_at = :new_due, #extended = :true, #extension_reason = :reason, #updated_at = :now',
      ConditionExpression:
        'attribute_exists(request_id) AND #status IN (:received, :running) AND #due_at = :old_due' +
        ' AND (attribute_not_exists(#extended) OR #extended = :false)',
      ExpressionAttributeValues: expect.objectContaining({
        ':new_due': '2027-01-15T00:00:00.000Z',
        ':old_due': '2026-12-01T00:00:00.000Z',
        ':reason': 'several accounts to search',
        ':now': NOW.toISOString(),
      }),
    });
    expect(result).toEqual({
      request_id: REQUEST_ID,
      regulation: 'ccpa',
      previous_due_at: '2026-12-01T00:00:00.000Z',
      due_at: '2027-01-15T00:00:00.000Z',
      reason: 'several accounts to search',
    });
    expect(io.stdout()).toContain('due 2026-12-01T00:00:00.000Z -> 2027-01-15T00:00:00.000Z');
    expect(io.stderr()).toContain('tell the subject about the extension and its reason before 2026-12-01');
  });

  it('refuses a second extension (exit 1)', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(ledgerRecord({ extended: true, extension_reason: 'first' })) });
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, reason: 'again' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('already been extended once'),
    });
    expect(dbMock.commandCalls(UpdateCommand)).toHaveLength(0);
  });

  it('refuses once the original deadline has passed', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(ledgerRecord({ due_at: '2026-11-20T00:00:00.000Z' })) });
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, reason: 'late' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('has passed; extend only before it'),
    });
  });

  it('refuses a request that is no longer open', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord({ status: 'failed' })) });
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, reason: 'r' }, collectingIo()),
    ).rejects.toThrow('is failed; only received or running requests can be extended');
  });

  it('reports the rule that applies when another operator extended it first', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(ledgerRecord()) })
      .resolves({ Item: storedItem(ledgerRecord({ extended: true })) });
    dbMock
      .on(UpdateCommand)
      .rejects(
        new ConditionalCheckFailedException({ message: 'The conditional request failed', $metadata: {} }),
      );
    await expect(
      runExtend(testContext(), { requestId: REQUEST_ID, reason: 'r' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('already been extended once'),
    });
  });
});

describe('runExtend audit record', () => {
  it('appends the new and previous due dates to the audit chain', async () => {
    const item = ledgerRecord({ regulation: 'gdpr' });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    dbMock.on(UpdateCommand).resolves({});
    await runExtend(testContext(), { requestId: REQUEST_ID, reason: 'complex request' }, collectingIo());
    const body = String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body);
    expect(JSON.parse(body)).toMatchObject({
      step: 'Operator',
      action: 'deadline_extended',
      facts: { previous_due_at: item.due_at, due_at: item.extension_limit_at },
    });
  });
});
