import { S3Client } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { traceClient, traced, tracer } from '#shared/powertools';

describe('powertools outside Lambda', () => {
  it('loads no Tracer, so no X-Ray context hook follows every promise, and runs work untraced', async () => {
    expect(process.env.AWS_EXECUTION_ENV).toBeUndefined();
    expect(tracer).toBeUndefined();
    const client = new S3Client({ region: 'eu-west-1' });
    const stack = client.middlewareStack.identify();

    expect(traceClient(client)).toBe(client);
    expect(client.middlewareStack.identify()).toEqual(stack);
    const done = await traced('platform.retrieveUser', async (annotate) => {
      annotate('status', 200);
      return 'done';
    });
    expect(done).toBe('done');
  });
});
