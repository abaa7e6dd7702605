import { createHash } from 'node:crypto';
import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterEach, describe, expect, it } from 'vitest';
import { LOCAL_NAMES } from '#local/runtime/workflow';
import { packageWorkPrefix } from '../../../lambdas/build-package/continuation.ts';
import { type Harness, requestFor, startHarness, TEST_EXPORT_TOKEN, TEST_SSO_TOKEN } from './harness.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

describe('an access request whose package does not fit in one invocation', () => {
  it('runs BuildPackage again with its continuation and ends exported, its package matching the ledger', async () => {
    // Every BuildPackage invocation has 2 s left: the first stops after ordering, the second writes.
    const invocations: unknown[] = [];
    harness = await startHarness({
      stepOverrides: {
        BuildPackage: (real) => (event) => {
          invocations.push(event);
          return real(event, { getRemainingTimeInMillis: () => 2_000 });
        },
      },
    });
    const h = harness;
    const request = requestFor('u-alice');

    const results = await submitAndSettle(h, request);

    const result = results.get(request.request_id);
    expect(result?.status).toBe('SUCCEEDED');
    const entered = (result?.events ?? [])
      .filter((event) => event.type === 'StateEntered')
      .map((event) => String(Object(event.state).name));
    expect(entered.filter((name) => /Package/.test(name))).toEqual([
      'BuildPackage',
      'BuildPackageAdmitted?',
      'PackageContinues?',
      'ContinuePackage',
      'BuildPackageAdmitted?',
    ]);
    expect(entered.at(-1)).toBe('RecordExportedDone');
    expect(invocations).toEqual([
      { request_id: request.request_id, execution: expect.any(String) },
      {
        request_id: request.request_id,
        execution: expect.any(String),
        continuation: { pass: 2, bytes: expect.any(Number), sha256: expect.stringMatching(/^[0-9a-f]{64}$/) },
      },
    ]);
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported' });
    const facts = item.subject_package;
    if (facts === undefined) throw new Error('the package must be recorded');
    const { Body } = await h.workflow.s3.send(
      new GetObjectCommand({ Bucket: LOCAL_NAMES.archiveBucket, Key: facts.key }),
    );
    const stored = Buffer.from((await Body?.transformToByteArray()) ?? []);
    expect(createHash('sha256').update(stored).digest('hex')).toBe(facts.sha256);
    // The work between the passes is gone.
    const { Contents } = await h.workflow.s3.send(
      new ListObjectsV2Command({
        Bucket: LOCAL_NAMES.archiveBucket,
        Prefix: packageWorkPrefix(request.request_id),
      }),
    );
    expect(Contents ?? []).toEqual([]);
    // State carries no identifier and no token.
    const state = JSON.stringify(result?.events);
    for (const secret of [
      'u-alice',
      'u_sample_alice',
      'alice@example.com',
      TEST_SSO_TOKEN,
      TEST_EXPORT_TOKEN,
    ]) {
      expect(state).not.toContain(secret);
    }
  });
});
