import { createSocket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, type StubServer, startStubServer } from '../../../helpers/stub-server.ts';

/**
 * The Tracer as it runs in Lambda: the environment Lambda sets, and an X-Ray daemon that is a UDP
 * socket on loopback, which receives every subsegment the function closes. The modules are loaded
 * after the environment is set, as a Lambda container loads them.
 */
const daemon = createSocket('udp4');
const received: string[] = [];
let stub: StubServer;
let powertools: typeof import('#shared/powertools');
let sdkClients: typeof import('#shared/sdk-clients');
let platform: typeof import('#shared/platform-client');

const PRIMARY_KEY = 'alice.tracing@example.com';
const TRACE_ROOT = '1-6745a1b2-0123456789abcdef01234567';

beforeAll(async () => {
  daemon.on('message', (message) => received.push(message.toString('utf8')));
  await new Promise<void>((resolve) => daemon.bind(0, '127.0.0.1', resolve));
  const { port } = daemon.address() as AddressInfo;
  Object.assign(process.env, {
    AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs22.x',
    LAMBDA_TASK_ROOT: '/var/task',
    AWS_LAMBDA_FUNCTION_NAME: 'svc-dsr-test',
    _X_AMZN_TRACE_ID: `Root=${TRACE_ROOT};Parent=53995c3f42cd8ad8;Sampled=1`,
    AWS_XRAY_DAEMON_ADDRESS: `127.0.0.1:${port}`,
    AWS_XRAY_CONTEXT_MISSING: 'IGNORE_ERROR',
  });
  powertools = await import('#shared/powertools');
  sdkClients = await import('#shared/sdk-clients');
  platform = await import('#shared/platform-client');
  stub = await startStubServer();
});

afterAll(async () => {
  await stub.close();
  daemon.close();
});

/** The subsegment documents the daemon received so far (each datagram: a header line, then the JSON). */
async function subsegments(count: number): Promise<Record<string, unknown>[]> {
  for (let waited = 0; received.length < count && waited < 5_000; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return received.map((datagram) => JSON.parse(datagram.slice(datagram.indexOf('\n') + 1)));
}

describe('tracing in Lambda', () => {
  it('traces a platform call by operation and status, with no URL and no subject identifier', async () => {
    stub.handle((_req, res) =>
      json(res, 200, {
        success: true,
        user: { primary_key: PRIMARY_KEY, svc_user_id: 'svc-9', user_name: 'alice' },
      }),
    );
    received.length = 0;
    const client = new platform.PlatformClient(
      { baseUrl: stub.url, exportUrl: stub.url, activityUrl: stub.url, spotId: 'sp_test', timeoutMs: 2_000 },
      { credentials: { ssoAccessToken: () => 'sso-secret-token' } },
    );

    await client.retrieveUser(PRIMARY_KEY);

    const [subsegment] = await subsegments(1);
    expect(subsegment).toMatchObject({
      name: 'platform.retrieveUser',
      trace_id: TRACE_ROOT,
      annotations: { status: 200 },
    });
    for (const datagram of received) {
      expect(datagram).not.toContain('alice');
      expect(datagram).not.toContain(stub.url);
      expect(datagram).not.toContain('sso-secret-token');
    }
  });

  it('traces every call of an SDK client prepared for svc-dsr', async () => {
    stub.handle((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end('zip');
    });
    received.length = 0;
    const s3 = sdkClients.prepareSdkClient(
      new S3Client({
        endpoint: stub.url,
        forcePathStyle: true,
        region: 'eu-west-1',
        credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      }),
    );

    await s3.send(new GetObjectCommand({ Bucket: 'archives', Key: 'exports/r1/attempt-1.zip' }));

    const [subsegment] = await subsegments(1);
    expect(subsegment).toMatchObject({ name: 'S3', namespace: 'aws', aws: { operation: 'GetObject' } });
  });

  it('marks a failed platform call with the error name only', async () => {
    stub.handle((_req, res) => json(res, 500, { success: false, message: `no user ${PRIMARY_KEY}` }));
    received.length = 0;
    const client = new platform.PlatformClient(
      { baseUrl: stub.url, exportUrl: stub.url, activityUrl: stub.url, spotId: 'sp_test', timeoutMs: 2_000 },
      { credentials: { ssoAccessToken: () => 'sso-secret-token' } },
    );

    await expect(client.retrieveUser(PRIMARY_KEY)).rejects.toThrow();

    const [subsegment] = await subsegments(1);
    expect(subsegment).toMatchObject({ name: 'platform.retrieveUser', annotations: { status: 500 } });
    expect(received.join('')).not.toContain('alice');
    expect(powertools.tracer?.isTracingEnabled()).toBe(true);
  });
});
