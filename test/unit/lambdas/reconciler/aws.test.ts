import { ListExecutionsCommand, SFNClient } from '@aws-sdk/client-sfn';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { LIST_PAGE_SIZE, sfnLister } from '../../../../lambdas/reconciler/aws.ts';

const sfnMock = mockClient(SFNClient);
const MACHINE = 'arn:aws:states:eu-west-1:111122223333:stateMachine:svc-dsr-dev-workflow';

beforeEach(() => {
  sfnMock.reset();
});

describe('sfnLister', () => {
  it('asks for a thousand executions of one status a page, and answers their names and the next token', async () => {
    // Prepare
    sfnMock.on(ListExecutionsCommand).resolves({
      executions: [
        {
          executionArn: `${MACHINE.replace(':stateMachine:', ':execution:')}:r-1-retry-2`,
          stateMachineArn: MACHINE,
          name: 'r-1-retry-2',
          status: 'FAILED',
          startDate: new Date(),
        },
      ],
      nextToken: 'page-2',
    });
    const list = sfnLister(new SFNClient({}), MACHINE);

    // Act
    const page = await list('FAILED', 'page-1');

    // Assess
    expect(LIST_PAGE_SIZE).toBe(1000);
    expect(sfnMock).toHaveReceivedCommandWith(ListExecutionsCommand, {
      stateMachineArn: MACHINE,
      statusFilter: 'FAILED',
      maxResults: 1000,
      nextToken: 'page-1',
    });
    expect(page).toEqual({ executions: [{ name: 'r-1-retry-2', status: 'FAILED' }], nextToken: 'page-2' });
  });

  it('lists a status it does not know yet as running, so no request is resumed beside a live execution', async () => {
    // Prepare
    sfnMock.on(ListExecutionsCommand).resolves({
      executions: [
        {
          executionArn: 'arn:x',
          stateMachineArn: MACHINE,
          name: 'r-2',
          status: 'PAUSED' as never,
          startDate: new Date(),
        },
      ],
    });

    // Act
    const page = await sfnLister(new SFNClient({}), MACHINE)('RUNNING');

    // Assess
    expect(page).toEqual({ executions: [{ name: 'r-2', status: 'RUNNING' }] });
    expect(sfnMock.commandCalls(ListExecutionsCommand)[0]?.args[0].input).not.toHaveProperty('nextToken');
  });

  it('refuses a page whose executions carry no name, saying what was wrong', async () => {
    // Prepare
    sfnMock.on(ListExecutionsCommand).resolves({ executions: [{ status: 'RUNNING' } as never] });

    // Act / Assess
    await expect(sfnLister(new SFNClient({}), MACHINE)('RUNNING')).rejects.toThrow(
      /ListExecutions answered a page that is not a list of named executions/,
    );
  });

  it('lets a throttled call through for the pacer to back off', async () => {
    // Prepare
    sfnMock
      .on(ListExecutionsCommand)
      .rejects(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }));

    // Act / Assess
    await expect(sfnLister(new SFNClient({}), MACHINE)('RUNNING')).rejects.toMatchObject({
      name: 'ThrottlingException',
    });
  });
});
