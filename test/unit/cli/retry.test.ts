import { GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DescribeExecutionCommand, ExecutionAlreadyExists, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { describe, expect, it } from 'vitest';
import { openShardKey } from '#shared/ledger';
import { runRetry } from '../../../bin/cli/commands/retry.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import {
  conditionalFailure,
  ledgerRecord,
  ledgerWrites,
  mockOperatorClients,
  NAMES,
  NOW,
  OPERATOR,
  REQUEST_ID,
  storedItem,
  testContext,
  written,
} from './helpers.ts';

const { ledgerMock, s3Mock, sfnMock } = mockOperatorClients();

const failed = (overrides = {}) =>
  ledgerRecord({
    status: 'failed',
    step: 'exporting',
    executions: 1,
    export_attempts: 3,
    error: { code: 'export_failed', message: 'the platform failed the export 3 times' },
    ...overrides,
  });

describe('runRetry', () => {
  it('resets a failed request, bumps executions, and starts <request_id>-retry-<n> with the state-safe input', async () => {
    // Prepare
    const item = failed({ svc_user_id: undefined, type: 'erasure', regulation: 'ccpa' });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock.on(UpdateItemCommand).resolves(written({ ...item, status: 'received', executions: 2 }));
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runRetry(testContext(), { requestId: REQUEST_ID }, io);
    // Assess
    expect(exitCode).toBe(0);
    const [write] = ledgerWrites(ledgerMock);
    expect(write?.update).toContain('REMOVE #error');
    expect(write?.values).toMatchObject({
      ':status': 'received',
      ':open_shard': openShardKey(REQUEST_ID, 'received'),
      ':executions': 2,
      ':export_attempts_base': 3,
      ':export_waited_seconds': 0,
      ':export_status': 'failed',
      ':updated_at': NOW.toISOString(),
      ':if_failed': 'failed',
      ':if_executions': 1,
    });
    expect(sfnMock).toHaveReceivedCommandWith(StartExecutionCommand, {
      stateMachineArn: NAMES.StateMachineArn,
      name: `${REQUEST_ID}-retry-2`,
      input: JSON.stringify({ request_id: REQUEST_ID, type: 'erasure', regulation: 'ccpa' }),
    });
    expect(result).toMatchObject({ status: 'received', started: true, execution_arn: 'arn:exec' });
    expect(result.previous_error?.code).toBe('export_failed');
    expect(io.stdout()).toContain(`execution ${REQUEST_ID}-retry-2 started`);
  });

  it('keeps the export under way when the failure was not the export itself', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(failed({ error: { code: 'platform_auth', message: 'refused' } })) });
    ledgerMock.on(UpdateItemCommand).resolves(written(failed({ status: 'running', executions: 2 })));
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });
    await runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo());
    const [write] = ledgerWrites(ledgerMock);
    expect(write?.update).not.toContain('#export_status');
    expect(write?.values).toMatchObject({ ':export_attempts_base': 3 });
  });

  it('resumes a request whose subject was already resolved as running, since the later steps need running', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(failed()) });
    ledgerMock.on(UpdateItemCommand).resolves(written(failed({ status: 'running', executions: 2 })));
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });
    const { result } = await runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo());
    expect(result.status).toBe('running');
    expect(ledgerWrites(ledgerMock)[0]?.values).toMatchObject({ ':status': 'running' });
  });

  it('refuses a request an execution is still running, without writing or starting anything', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord({ status: 'running' })) });
    sfnMock.on(DescribeExecutionCommand).resolves({ status: 'RUNNING' });
    await expect(runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo())).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(
        `is running and its execution ${REQUEST_ID} is running; it needs no retry: the execution goes on by itself`,
      ),
    });
    // It never sends the operator to cancel, which would record the subject as having withdrawn.
    await expect(runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo())).rejects.toMatchObject({
      message: expect.not.stringContaining('cancel it first'),
    });
    expect(ledgerMock.commandCalls(UpdateItemCommand)).toHaveLength(0);
    expect(sfnMock.commandCalls(StartExecutionCommand)).toHaveLength(0);
  });

  it('refuses a request that ended, without writing or starting anything', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(ledgerRecord({ status: 'completed' })) });
    await expect(runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo())).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(
        'is completed; only failed requests, or open ones with no running execution',
      ),
    });
    expect(ledgerMock.commandCalls(UpdateItemCommand)).toHaveLength(0);
    expect(sfnMock.calls()).toHaveLength(0);
  });

  it('retries an open request whose execution ended, on the condition that it is still open', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(failed({ status: 'running', error: undefined })) });
    sfnMock.on(DescribeExecutionCommand).resolves({ status: 'TIMED_OUT' });
    ledgerMock.on(UpdateItemCommand).resolves(written(failed({ status: 'running', executions: 2 })));
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });

    const { exitCode, result } = await runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo());

    expect(exitCode).toBe(0);
    expect(result.execution).toBe(`${REQUEST_ID}-retry-2`);
    expect(ledgerWrites(ledgerMock)[0]?.values).toMatchObject({ ':if_running': 'running' });
  });

  it('puts the request back to failed when the execution cannot start, so the retry can be repeated', async () => {
    // Prepare
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(failed()) });
    ledgerMock.on(UpdateItemCommand).resolves(written(failed({ status: 'running', executions: 2 })));
    sfnMock
      .on(StartExecutionCommand)
      .rejects(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }));
    // Act
    const error = await runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo()).catch(
      (caught: unknown) => caught,
    );
    // Assess
    expect(error).toMatchObject({ exitCode: 1, message: expect.stringContaining('is failed again') });
    expect(ledgerWrites(ledgerMock)[1]?.values).toMatchObject({
      ':status': 'failed',
      ':open_shard': openShardKey(REQUEST_ID, 'failed'),
      ':executions': 1,
      ':if_executions': 2,
      ':if_running': 'running',
      ':error': { code: 'export_failed', message: 'the platform failed the export 3 times' },
    });
  });

  it('treats an execution of that name that already exists as started by an earlier attempt', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(failed()) });
    ledgerMock.on(UpdateItemCommand).resolves(written(failed({ status: 'running', executions: 2 })));
    sfnMock
      .on(StartExecutionCommand)
      .rejects(new ExecutionAlreadyExists({ message: 'exists', $metadata: {} }));
    const { exitCode, result } = await runRetry(
      testContext(),
      { requestId: REQUEST_ID, json: true },
      collectingIo(),
    );
    expect(exitCode).toBe(0);
    expect(result.started).toBe(false);
    // One change of the request (the retry claim); nothing undoes it.
    expect(ledgerWrites(ledgerMock)).toHaveLength(1);
  });

  it('reports a concurrent retry instead of starting a second execution', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(failed()) })
      .resolves({ Item: storedItem(failed({ status: 'running', executions: 2 })) });
    ledgerMock.on(UpdateItemCommand).rejects(conditionalFailure());
    sfnMock.on(DescribeExecutionCommand).resolves({ status: 'RUNNING' });
    await expect(runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo())).rejects.toThrow(
      `its execution ${REQUEST_ID}-retry-2 is running; it needs no retry`,
    );
    expect(sfnMock.commandCalls(StartExecutionCommand)).toHaveLength(0);
  });
});

describe('runRetry racing another retry', () => {
  it('refuses a request whose run was claimed a moment ago and whose execution is not started yet', async () => {
    // Prepare: another retry wrote run 2 a second ago and is about to start its execution.
    const claimedAt = new Date(NOW.getTime() - 1_000).toISOString();
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(failed({ status: 'running', executions: 2, updated_at: claimedAt })) });
    sfnMock
      .on(DescribeExecutionCommand)
      .rejects(Object.assign(new Error('none'), { name: 'ExecutionDoesNotExist' }));

    // Act
    const retrying = runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo());

    // Assess
    await expect(retrying).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining(`its execution ${REQUEST_ID}-retry-2 is being started`),
    });
    expect(ledgerMock.commandCalls(UpdateItemCommand)).toHaveLength(0);
    expect(sfnMock.commandCalls(StartExecutionCommand)).toHaveLength(0);
  });

  it('retries a request whose claimed run never started once the start grace has passed', async () => {
    // Prepare: a run claimed three minutes ago whose execution never started (the claimer died).
    const claimedAt = new Date(NOW.getTime() - 3 * 60_000).toISOString();
    const item = failed({ status: 'running', executions: 2, updated_at: claimedAt, error: undefined });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock.on(UpdateItemCommand).resolves(written({ ...item, executions: 3 }));
    sfnMock
      .on(DescribeExecutionCommand)
      .rejects(Object.assign(new Error('none'), { name: 'ExecutionDoesNotExist' }));
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });

    // Act
    const { result } = await runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo());

    // Assess
    expect(result.execution).toBe(`${REQUEST_ID}-retry-3`);
  });
});

describe('runRetry audit record', () => {
  it('appends the retry and the execution it starts to the audit chain before starting it', async () => {
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(failed()) });
    ledgerMock.on(UpdateItemCommand).resolves(written(failed({ status: 'received', executions: 2 })));
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: 'arn:exec', startDate: NOW });
    await runRetry(testContext(), { requestId: REQUEST_ID }, collectingIo());
    const body = String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body);
    expect(JSON.parse(body)).toMatchObject({
      action: 'request_retried',
      facts: {
        execution: `${REQUEST_ID}-retry-2`,
        previous_error: 'export_failed',
        fresh_export: true,
        operator: OPERATOR,
        reason: null,
      },
    });
  });
});
