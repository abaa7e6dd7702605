import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SDK_LOGGER_MIDDLEWARE, withoutSdkLogging } from '#shared/sdk-clients';
import { type StubServer, startStubServer } from '../../../helpers/stub-server.ts';

const config = (endpoint: string) => ({
  region: 'us-east-1',
  endpoint,
  forcePathStyle: true,
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
});

describe('withoutSdkLogging', () => {
  let stub: StubServer;
  beforeEach(async () => {
    stub = await startStubServer();
  });
  afterEach(async () => {
    await stub.close();
  });

  it('removes the middleware the SDK registers as its logger', () => {
    // The name is the SDK's: were it renamed, the first expectation fails and the removal is a no-op.
    expect(new S3Client(config(stub.url)).middlewareStack.identify().join('\n')).toContain(
      SDK_LOGGER_MIDDLEWARE,
    );
    const client = withoutSdkLogging(new S3Client(config(stub.url)));
    expect(client.middlewareStack.identify().join('\n')).not.toContain(SDK_LOGGER_MIDDLEWARE);
  });

  it('leaves calls working, and no command input reaches the logger', async () => {
    stub.handle((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/zip', 'content-length': '3' }).end('abc');
    });
    // What each log call received as the command's input.
    const logged: string[] = [];
    const record = (entry: unknown) => {
      const input = typeof entry === 'object' && entry !== null && 'input' in entry ? entry.input : entry;
      logged.push(JSON.stringify(input) ?? '');
    };
    const logger = { debug: record, info: record, warn: record, error: record };
    const client = withoutSdkLogging(new S3Client({ ...config(stub.url), logger }));
    const answer = await client.send(new GetObjectCommand({ Bucket: 'bucket', Key: 'subject-key' }));
    expect(await answer.Body?.transformToString()).toBe('abc');
    expect(stub.requests.map((request) => request.url)).toEqual(['/bucket/subject-key?x-id=GetObject']);
    expect(logged.join('\n')).not.toContain('subject-key');
    client.destroy();

    // The same client with its logger middleware passes the key to the logger.
    const logging = new S3Client({ ...config(stub.url), logger });
    await (
      await logging.send(new GetObjectCommand({ Bucket: 'bucket', Key: 'subject-key' }))
    ).Body?.transformToString();
    expect(logged.join('\n')).toContain('subject-key');
    logging.destroy();
  });
});
