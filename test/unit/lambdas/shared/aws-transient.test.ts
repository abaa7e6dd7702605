import {
  ConditionalCheckFailedException,
  ProvisionedThroughputExceededException,
} from '@aws-sdk/client-dynamodb';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AwsTransientError, awsTransientError, PlatformAuthError } from '#shared/errors';
import type { StepDeps } from '#shared/step-deps';
import { makeStepHandler } from '#shared/step-handler';

const metadata = (httpStatusCode: number) => ({ $metadata: { httpStatusCode }, $fault: 'server' as const });

/** A step whose domain function throws `error`. */
function failingWith(error: unknown) {
  const step = {
    name: 'Probe',
    input: z.object({ request_id: z.string() }),
    output: z.object({}),
    run: async () => {
      throw error;
    },
  };
  return makeStepHandler(step, () => ({ retryAfterCapSeconds: 0, logger: console }) as unknown as StepDeps);
}

describe('a step handler', () => {
  it('turns a DynamoDB throttle into AwsTransientError, naming the service error only', async () => {
    const throttle = new ProvisionedThroughputExceededException({ message: 'slow down', ...metadata(400) });

    const failure = await failingWith(throttle)({ request_id: 'r-1' }).catch((error: unknown) => error);

    expect(failure).toBeInstanceOf(AwsTransientError);
    expect((failure as Error).name).toBe('AwsTransientError');
    expect((failure as Error).message).toContain('ProvisionedThroughputExceededException');
  });

  it('turns S3 SlowDown, a KMS throttle inside a wrapper and a connection reset into AwsTransientError', async () => {
    const slowDown = new S3ServiceException({ name: 'SlowDown', message: 'Please reduce', ...metadata(503) });
    const kms = Object.assign(new Error('GetParameterError'), {
      cause: Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException', $metadata: {} }),
    });
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    for (const error of [slowDown, kms, reset]) {
      await expect(failingWith(error)({ request_id: 'r-1' })).rejects.toBeInstanceOf(AwsTransientError);
    }
  });

  it('leaves refused conditions, access denials and its own errors as they are', async () => {
    const refused = new ConditionalCheckFailedException({ message: 'no', ...metadata(400) });
    const denied = Object.assign(new Error('not authorized'), {
      name: 'AccessDeniedException',
      $metadata: { httpStatusCode: 400 },
    });
    const auth = new PlatformAuthError('refused', 401);
    for (const error of [refused, denied, auth]) {
      expect(awsTransientError(error)).toBeUndefined();
      await expect(failingWith(error)({ request_id: 'r-1' })).rejects.toBe(error);
    }
  });
});
