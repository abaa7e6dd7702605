// The reconciler's AWS side: execution statuses read with DescribeExecution.
import { DescribeExecutionCommand, type SFNClient } from '@aws-sdk/client-sfn';
import { z } from 'zod';
import type { ExecutionLookup, ExecutionStatus } from '#shared/executions';

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
