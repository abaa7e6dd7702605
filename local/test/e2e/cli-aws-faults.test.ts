import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { runCli } from '../../../test/helpers/cli.ts';

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-aws-faults-'));
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

function request(primaryKey: string, type: 'access' | 'erasure') {
  return {
    request_id: randomUUID(),
    type,
    regulation: 'gdpr',
    primary_key: primaryKey,
    received_at: new Date(Date.now() - 3600 * 1000).toISOString(),
    verification: {
      method: 'email_link',
      verified_by: 'privacy-team',
      verified_at: new Date().toISOString(),
    },
  };
}

async function fileWith(name: string, content: unknown): Promise<string> {
  const path = join(workdir, name);
  await writeFile(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

const summarySchema = z.object({
  requests: z.array(z.object({ request_id: z.string(), status: z.string(), outcome: z.string().nullable() })),
});

describe('svc-dsr local --aws-faults', () => {
  it('refuses a bad file with exit code 2 and a message naming each bad field', async () => {
    // Prepare
    const faults = await fileWith('bad.json', { seed: 1.5, throttle_rate: 2, services: ['dynamo'] });

    // Act
    const result = await runCli(['local', '--aws-faults', faults, '--data-dir', join(workdir, 'bad')]);

    // Assess
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(faults);
    expect(result.stderr).toContain('seed: must be a whole number');
    expect(result.stderr).toContain('throttle_rate: must be between 0 and 1');
    expect(result.stderr).toContain('services[0]: must be one of dynamodb, s3, sqs, lambda, states');
  });

  it('refuses a file that is not JSON with exit code 2', async () => {
    // Prepare
    const faults = await fileWith('broken.json', '{"throttle_rate": ');

    // Act
    const result = await runCli(['local', '--aws-faults', faults, '--data-dir', join(workdir, 'broken')]);

    // Assess
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('is not valid JSON');
  });

  it('completes the requests while a share of the AWS calls is throttled', async () => {
    // Prepare: Lambda invokes are left out, since a throttled invoke is a Retry matter for the workflow.
    const faults = await fileWith('good.json', {
      seed: 3,
      throttle_rate: 0.1,
      services: ['dynamodb', 's3', 'sqs', 'states'],
    });
    const access = request('u-alice', 'access');
    const erasure = request('u-bruno', 'erasure');
    const requests = await fileWith(
      'requests.jsonl',
      `${JSON.stringify(access)}\n${JSON.stringify(erasure)}\n`,
    );

    // Act
    const result = await runCli(
      [
        'local',
        '--aws-faults',
        faults,
        '--requests',
        requests,
        '--json',
        '--data-dir',
        join(workdir, 'good'),
      ],
      { timeoutMs: 200_000 },
    );

    // Assess
    expect(result.code, result.stderr).toBe(0);
    const summary = summarySchema.parse(JSON.parse(result.stdout));
    expect(summary.requests).toEqual(
      expect.arrayContaining([
        { request_id: access.request_id, status: 'completed', outcome: 'exported' },
        { request_id: erasure.request_id, status: 'completed', outcome: 'erased' },
      ]),
    );
  }, 240_000);

  it('reaches the stand-ins: with every DynamoDB call throttled, local mode cannot create its ledger', async () => {
    // Prepare
    const faults = await fileWith('all.json', { throttle_rate: 1, services: ['dynamodb'] });

    // Act
    const result = await runCli(['local', '--aws-faults', faults, '--data-dir', join(workdir, 'all')], {
      timeoutMs: 100_000,
    });

    // Assess
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/ThrottlingException|Rate of requests exceeds/);
  }, 120_000);
});
