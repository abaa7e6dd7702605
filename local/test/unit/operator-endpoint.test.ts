import { randomUUID } from 'node:crypto';
import {
  ListObjectsV2Command,
  ListObjectVersionsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { SFNClient, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { operatorInvoker, signedHttpTransport } from '../../../bin/cli/operator-client.ts';
import { computeDeadlines } from '../../../lambdas/shared/deadlines.ts';
import { Ledger } from '../../../lambdas/shared/ledger/index.ts';
import { createLedgerTable } from '../../../lambdas/shared/ledger/table.ts';
import { type OperatorEndpoint, startOperatorEndpoint } from '../../runtime/operator-endpoint.ts';
import { startDynamo } from '../helpers/dynamo.ts';

const NOW = new Date('2026-11-21T12:00:00.000Z');
const CREDENTIALS = { accessKeyId: 'local-key', secretAccessKey: 'local-secret' };
const s3Mock = mockClient(S3Client);
const sfnMock = mockClient(SFNClient);
let dynamo: Awaited<ReturnType<typeof startDynamo>>;
let ledger: Ledger;
let endpoint: OperatorEndpoint;
const silent = { info() {}, warn() {}, error() {}, debug() {} };

beforeAll(async () => {
  dynamo = await startDynamo();
  await createLedgerTable(dynamo.client, 'ledger');
  ledger = new Ledger(dynamo.client, 'ledger', () => NOW);
  endpoint = await startOperatorEndpoint(
    {
      ledger,
      s3: new S3Client({ region: 'us-east-1' }),
      sfn: new SFNClient({ region: 'us-east-1' }),
      names: {
        ArchiveBucketName: 'archives',
        AuditBucketName: 'audit',
        StateMachineArn: 'arn:aws:states:us-east-1:000000000000:stateMachine:svc-dsr-local',
      },
      clock: () => NOW,
    },
    { accessKeyId: CREDENTIALS.accessKeyId, logger: silent, principal: 'local-user:serving-login' },
  );
});
afterAll(async () => {
  await endpoint.close();
  await dynamo.close();
});
beforeEach(() => {
  s3Mock.reset();
  s3Mock.on(ListObjectsV2Command).resolves({});
  s3Mock.on(PutObjectCommand).resolves({});
  s3Mock.on(ListObjectVersionsCommand).resolves({});
  sfnMock.reset();
  sfnMock.on(StopExecutionCommand).resolves({ stopDate: NOW });
});

async function runningRequest(): Promise<string> {
  const requestId = randomUUID();
  await ledger.createReceived(
    {
      request_id: requestId,
      type: 'access',
      regulation: 'gdpr',
      primary_key: 'site-user-pk-1',
      received_at: '2026-11-20T09:00:00Z',
      verification: { method: 'email_link', verified_by: 'pt', verified_at: '2026-11-20T09:00:00Z' },
    },
    'fp',
    computeDeadlines('gdpr', new Date('2026-11-20T09:00:00Z')),
  );
  return requestId;
}

describe("local mode's operator endpoint", () => {
  it("runs the CLI's signed command through the handler, recording the serving user, not a name the CLI sends", async () => {
    // Prepare: the CLI's transport, as it signs for a function URL
    const requestId = await runningRequest();
    const invoke = operatorInvoker(
      signedHttpTransport(
        endpoint.url,
        { region: 'us-east-1', credentials: async () => CREDENTIALS },
        10_000,
      ),
      () => new Error('unknown') as never,
    );
    // Act
    const result = await invoke({
      command: 'cancel',
      request_id: requestId,
      reason: 'withdrawn',
      ...{ operator: 'arn:aws:iam::111122223333:user/forged' },
    });
    // Assess
    expect(result).toMatchObject({ status: 'cancelled', previous_status: 'received' });
    expect(await ledger.require(requestId)).toMatchObject({ status: 'cancelled' });
    const record = JSON.parse(String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body));
    expect(record.facts.operator).toBe('local-user:serving-login');
  });

  it('refuses a request not signed with the local credentials (403), changing nothing', async () => {
    const requestId = await runningRequest();
    const answer = await fetch(endpoint.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'cancel', request_id: requestId, reason: 'r' }),
    });
    expect(answer.status).toBe(403);
    const otherKey = operatorInvoker(
      signedHttpTransport(
        endpoint.url,
        { region: 'us-east-1', credentials: async () => ({ ...CREDENTIALS, accessKeyId: 'someone-else' }) },
        10_000,
      ),
      () => new Error('unknown') as never,
    );
    await expect(otherKey({ command: 'cancel', request_id: requestId, reason: 'r' })).rejects.toMatchObject({
      message: expect.stringContaining('HTTP 403'),
    });
    expect(await ledger.require(requestId)).toMatchObject({ status: 'received' });
  });
});
