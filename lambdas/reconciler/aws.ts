// The reconciler's AWS side: executions listed a thousand at a time, and read one by one.
import { DescribeExecutionCommand, ListExecutionsCommand, type SFNClient } from '@aws-sdk/client-sfn';
import { z } from 'zod';
import type { ExecutionLister, ExecutionLookup, ExecutionStatus } from '#shared/executions';

const statusSchema = z.enum(['RUNNING', 'SUCCEEDED', 'FAILED', 'TIMED_OUT', 'ABORTED', 'PENDING_REDRIVE']);

/** The ARN of the execution `name` of the state machine `stateMachineArn`. */
export function executionArnOf(stateMachineArn: string, name: string): string {
  return `${stateMachineArn.replace(':stateMachine:', ':execution:')}:${name}`;
}

/** Execution statuses through DescribeExecution (metadata only: no input, no output). */
export function sfnLookup(sfn: SFNClient, stateMachineArn: string): ExecutionLookup {
  return async (name): Promise<ExecutionStatus> => {
    try {
      const answer = await sfn.send(
        new DescribeExecutionCommand({
          executionArn: executionArnOf(stateMachineArn, name),
          includedData: 'METADATA_ONLY',
        }),
      );
      const status = statusSchema.safeParse(answer.status);
      // A status this code does not know yet is treated as live: resuming it could run it twice.
      return status.success ? status.data : 'RUNNING';
    } catch (error) {
      if (error instanceof Error && error.name === 'ExecutionDoesNotExist') return 'MISSING';
      throw error;
    }
  };
}

/** The most executions ListExecutions answers in one page. */
export const LIST_PAGE_SIZE = 1000;

const listAnswerSchema = z.object({
  executions: z.array(z.looseObject({ name: z.string().min(1), status: z.string() })).default([]),
  nextToken: z.string().min(1).optional(),
});

/**
 * The state machine's executions with one status, through ListExecutions: a thousand a page, each
 * by its name (`<request_id>` or `<request_id>-retry-<n>`) and status. A status this code does not
 * know yet is listed as live, as sfnLookup reads it.
 */
export function sfnLister(sfn: SFNClient, stateMachineArn: string): ExecutionLister {
  return async (status, nextToken) => {
    const answer = await sfn.send(
      new ListExecutionsCommand({
        stateMachineArn,
        statusFilter: status,
        maxResults: LIST_PAGE_SIZE,
        ...(nextToken === undefined ? {} : { nextToken }),
      }),
    );
    const parsed = listAnswerSchema.safeParse(answer);
    if (!parsed.success) {
      throw new Error(
        `ListExecutions answered a page that is not a list of named executions: ${z.prettifyError(parsed.error)}`,
      );
    }
    return {
      executions: parsed.data.executions.map(({ name, status: listed }) => {
        const known = statusSchema.safeParse(listed);
        return { name, status: known.success ? known.data : ('RUNNING' as const) };
      }),
      ...(parsed.data.nextToken === undefined ? {} : { nextToken: parsed.data.nextToken }),
    };
  };
}
