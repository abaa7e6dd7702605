import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CACHED_MIDDLEWARE, prepareSdkClient, SDK_LOGGER_MIDDLEWARE } from '#shared/sdk-clients';
import { type StubServer, startStubServer } from '../../../helpers/stub-server.ts';

const config = (endpoint: string) => ({
  region: 'us-east-1',
  endpoint,
  forcePathStyle: true,
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
});

describe('prepareSdkClient', () => {
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
    const client = prepareSdkClient(new S3Client(config(stub.url)));
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
    const client = prepareSdkClient(new S3Client({ ...config(stub.url), logger }));
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

describe('CACHED_MIDDLEWARE', () => {
  let stub: StubServer;
  beforeEach(async () => {
    stub = await startStubServer();
    stub.handle((_request, response) => {
      response.writeHead(200, { etag: '"e"', 'content-length': '0' }).end();
    });
  });
  afterEach(async () => {
    await stub.close();
  });

  /** Sends two PUTs; the second command carries a middleware of its own that adds a header. */
  async function twoPuts(client: S3Client): Promise<{ url: string; marked: boolean }[]> {
    await client.send(new PutObjectCommand({ Bucket: 'bucket', Key: 'audit/one.json', Body: '{"n":1}' }));
    const second = new PutObjectCommand({ Bucket: 'bucket', Key: 'audit/two.json', Body: '{"n":2}' });
    second.middlewareStack.add(
      (next) => async (args) => {
        const request = args.request as { headers: Record<string, string> };
        request.headers['x-marked'] = 'yes';
        return next(args);
      },
      { step: 'build', name: 'markRequest' },
    );
    await client.send(second);
    client.destroy();
    return stub.requests.map((request) => ({
      url: request.url ?? '',
      marked: request.headers['x-marked'] === 'yes',
    }));
  }

  it("sends each call's own input through the stack resolved once for its command class", async () => {
    const sent = await twoPuts(prepareSdkClient(new S3Client({ ...config(stub.url), ...CACHED_MIDDLEWARE })));

    expect(sent.map(({ url }) => url)).toEqual([
      '/bucket/audit/one.json?x-id=PutObject',
      '/bucket/audit/two.json?x-id=PutObject',
    ]);
    // The cached stack is the first command's: middleware added to a later command never runs,
    // which is why a client whose callers add middleware per command must not cache.
    expect(sent.map(({ marked }) => marked)).toEqual([false, false]);
  });

  it('is what makes per-command middleware run or not: without it the second call is marked', async () => {
    const sent = await twoPuts(prepareSdkClient(new S3Client(config(stub.url))));

    expect(sent.map(({ marked }) => marked)).toEqual([false, true]);
  });
});
