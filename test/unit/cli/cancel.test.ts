import { GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { ExecutionDoesNotExist, StopExecutionCommand } from '@aws-sdk/client-sfn';
import { describe, expect, it } from 'vitest';
import { runCancel } from '../../../bin/cli/commands/cancel.ts';
import { collectingIo } from '../../../bin/cli/format.ts';
import { CliError } from '../../../bin/cli/io.ts';
import {
  conditionalFailure,
  ledgerRecord,
  ledgerWrites,
  mockOperatorClients,
  NOW,
  OPERATOR,
  REQUEST_ID,
  storedItem,
  testContext,
  written,
} from './helpers.ts';

const { ledgerMock, s3Mock, sfnMock } = mockOperatorClients();

const EXECUTION_PREFIX = 'arn:aws:states:eu-west-1:111122223333:execution:dsr:';

async function failure(promise: Promise<unknown>): Promise<CliError> {
  const caught = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  if (!(caught instanceof CliError)) throw new Error(`expected a CliError, got ${String(caught)}`);
  return caught;
}

describe('runCancel', () => {
  it('cancels a running request through the ledger, then stops its executions', async () => {
    // Prepare
    const item = ledgerRecord({ type: 'erasure', executions: 2 });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock
      .on(UpdateItemCommand)
      .resolves(written({ ...item, status: 'cancelled', cancel_reason: 'withdrawn' }));
    sfnMock
      .on(StopExecutionCommand)
      .rejects(new ExecutionDoesNotExist({ message: 'Execution Does Not Exist', $metadata: {} }))
      .on(StopExecutionCommand, { executionArn: `${EXECUTION_PREFIX}${REQUEST_ID}` })
      .resolves({ stopDate: NOW })
      .on(StopExecutionCommand, { executionArn: `${EXECUTION_PREFIX}${REQUEST_ID}-retry-2` })
      .resolves({ stopDate: NOW });
    const io = collectingIo();
    // Act
    const { exitCode, result } = await runCancel(
      testContext(),
      { requestId: REQUEST_ID, reason: ' withdrawn ' },
      io,
    );
    // Assess
    expect(exitCode).toBe(0);
    expect(ledgerWrites(ledgerMock)).toEqual([
      expect.objectContaining({
        values: expect.objectContaining({ ':status': 'cancelled', ':cancel_reason': 'withdrawn' }),
      }),
    ]);
    expect(sfnMock).toHaveReceivedCommandWith(StopExecutionCommand, {
      executionArn: `${EXECUTION_PREFIX}${REQUEST_ID}`,
    });
    expect(result.stopped).toEqual([REQUEST_ID, `${REQUEST_ID}-retry-2`]);
    expect(result.stop_errors).toEqual([]);
    expect(io.stdout()).toBe(`cancelled ${REQUEST_ID} (was running, step exporting)\n`);
  });

  it('refuses once the erasure has started, without touching the ledger or the executions', async () => {
    ledgerMock
      .on(GetItemCommand)
      .resolves({ Item: storedItem(ledgerRecord({ type: 'erasure', step: 'erasing' })) });
    const error = await failure(
      runCancel(testContext(), { requestId: REQUEST_ID, reason: 'too late' }, collectingIo()),
    );
    expect(error.exitCode).toBe(1);
    expect(error.message).toContain('its erasure has started');
    expect(ledgerMock.commandCalls(UpdateItemCommand)).toHaveLength(0);
    expect(sfnMock.calls()).toHaveLength(0);
  });

  it('refuses when an erasure is recorded even though the step moved on', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(
        ledgerRecord({
          type: 'erasure',
          step: 'archiving',
          erasure: { outcome: 'deleted', platform_status: 200, at: '2026-11-20T10:00:00Z' },
        }),
      ),
    });
    const error = await failure(
      runCancel(testContext(), { requestId: REQUEST_ID, reason: 'r' }, collectingIo()),
    );
    expect(error.message).toContain('erasure has started');
  });

  it('refuses a request that has ended, naming its status', async () => {
    ledgerMock.on(GetItemCommand).resolves({
      Item: storedItem(ledgerRecord({ status: 'completed', step: undefined, outcome: 'exported' })),
    });
    const error = await failure(
      runCancel(testContext(), { requestId: REQUEST_ID, reason: 'r' }, collectingIo()),
    );
    expect(error.exitCode).toBe(1);
    expect(error.message).toContain('is completed; only received or running requests can be cancelled');
  });

  it('explains the refusal when the erasure started between the read and the conditional write', async () => {
    // Prepare
    ledgerMock
      .on(GetItemCommand)
      .resolvesOnce({ Item: storedItem(ledgerRecord({ type: 'erasure', step: 'archiving' })) })
      .resolves({ Item: storedItem(ledgerRecord({ type: 'erasure', step: 'erasing' })) });
    ledgerMock.on(UpdateItemCommand).rejects(conditionalFailure());
    // Act
    const error = await failure(
      runCancel(testContext(), { requestId: REQUEST_ID, reason: 'r' }, collectingIo()),
    );
    // Assess
    expect(error.exitCode).toBe(1);
    expect(error.message).toContain('erasure has started (step erasing)');
    expect(sfnMock.calls()).toHaveLength(0);
  });

  it('still reports the cancel when Step Functions refuses to stop an execution, with a warning', async () => {
    const item = ledgerRecord();
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock.on(UpdateItemCommand).resolves(written({ ...item, status: 'cancelled' }));
    sfnMock
      .on(StopExecutionCommand)
      .rejects(Object.assign(new Error('not allowed'), { name: 'AccessDeniedException' }));
    const io = collectingIo();
    const { exitCode, result } = await runCancel(
      testContext(),
      { requestId: REQUEST_ID, reason: 'r', json: true },
      io,
    );
    expect(exitCode).toBe(0);
    expect(result.stop_errors[0]).toEqual({
      execution: REQUEST_ID,
      error: 'AccessDeniedException: not allowed',
    });
    expect(io.stderr()).toContain('finds the request cancelled');
    expect(JSON.parse(io.stdout())).toMatchObject({ status: 'cancelled', previous_status: 'running' });
  });

  it('refuses a reason holding an e-mail address or a link, as the audit trail would, before reading anything', async () => {
    for (const reason of ['asked by jane.doe@example.com', 'see https://tickets.example/42']) {
      const error = await failure(
        runCancel(testContext(), { requestId: REQUEST_ID, reason }, collectingIo()),
      );
      expect(error.exitCode).toBe(2);
      expect(error.message).toMatch(/^--reason: .*the reason is kept in the audit record/);
    }
    expect(ledgerMock.calls()).toHaveLength(0);
  });

  it('refuses an empty reason with exit 2 before reading anything', async () => {
    const error = await failure(
      runCancel(testContext(), { requestId: REQUEST_ID, reason: '  ' }, collectingIo()),
    );
    expect(error.exitCode).toBe(2);
    expect(error.message).toContain('--reason');
    expect(ledgerMock.calls()).toHaveLength(0);
  });
});

describe('runCancel audit record', () => {
  it('appends the cancellation to the audit chain as its final record, with who cancelled and why', async () => {
    const item = ledgerRecord({ executions: 1 });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock
      .on(UpdateItemCommand)
      .resolves(written({ ...item, status: 'cancelled', cancel_reason: 'withdrawn by phone' }));
    sfnMock.on(StopExecutionCommand).resolves({ stopDate: NOW });

    await runCancel(testContext(), { requestId: REQUEST_ID, reason: 'withdrawn by phone' }, collectingIo());

    expect(s3Mock).toHaveReceivedCommandWith(PutObjectCommand, {
      Key: `audit/${REQUEST_ID}/000000.json`,
      IfNoneMatch: '*',
    });
    const body = String(s3Mock.commandCalls(PutObjectCommand)[0]?.args[0].input.Body);
    expect(JSON.parse(body)).toMatchObject({
      step: 'Operator',
      action: 'request_cancelled',
      facts: { previous_status: 'running', operator: OPERATOR, reason: 'withdrawn by phone' },
      final: true,
    });
  });

  it('says the ledger change stands when the audit record cannot be written (exit 1)', async () => {
    const item = ledgerRecord({ executions: 1 });
    ledgerMock.on(GetItemCommand).resolves({ Item: storedItem(item) });
    ledgerMock.on(UpdateItemCommand).resolves(written({ ...item, status: 'cancelled' }));
    s3Mock.on(PutObjectCommand).rejects(new Error('AccessDenied'));

    await expect(
      runCancel(testContext(), { requestId: REQUEST_ID, reason: 'withdrawn' }, collectingIo()),
    ).rejects.toMatchObject({
      exitCode: 1,
      message: expect.stringContaining('audit record (request_cancelled) could not be written'),
    });
  });
});
