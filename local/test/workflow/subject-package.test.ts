import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { packageKey } from '../../../lambdas/build-package/build-package.ts';
import { subjectPackageDataSchema } from '../../../lambdas/build-package/package-schema.ts';
import { STEPS } from '../../../lambdas/steps.ts';
import { productionConfig } from '../../../test/infra/fixtures.ts';
import { type Harness, requestFor, startHarness, TEST_EXPORT_TOKEN, TEST_SSO_TOKEN } from './harness.ts';
import { storedObject, zipEntries } from './stored.ts';
import { submitAndSettle } from './submit.ts';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const stored = storedObject;
const unzip = zipEntries;

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** What must never leave the ledger and the stored packages: the subject's identifiers and the tokens. */
const SECRETS_OF_ALICE = [
  'u-alice',
  'u_sample_alice',
  'alice@example.com',
  TEST_SSO_TOKEN,
  TEST_EXPORT_TOKEN,
];

describe('the notice a package states', () => {
  it("is the subject's own law's, from the stack config: §1798.110 for a CCPA consumer, Art. 15(1) and 15(2) for GDPR", async () => {
    harness = await startHarness({ config: { accessNotice: productionConfig.accessNotice } });
    const h = harness;
    const ccpa = requestFor('u-alice', { regulation: 'ccpa' });
    const gdpr = requestFor('u-alice');

    await submitAndSettle(h, ccpa);
    await submitAndSettle(h, gdpr);

    const pageOf = async (requestId: string) => {
      const facts = (await h.workflow.ledger.require(requestId)).subject_package;
      const inside = await unzip(await stored(h, facts?.key ?? ''));
      return {
        html: inside.get('index.html')?.toString('utf8') ?? '',
        data: subjectPackageDataSchema.parse(JSON.parse(inside.get('data.json')?.toString('utf8') ?? '')),
      };
    };
    const ccpaPage = await pageOf(ccpa.request_id);
    expect(ccpaPage.data.information).toEqual({ ccpa: productionConfig.accessNotice.ccpa });
    expect(ccpaPage.html).toContain('§1798.110(a)(4)');
    expect(ccpaPage.html).toContain(productionConfig.accessNotice.ccpa.thirdParties);
    expect(ccpaPage.html).not.toMatch(/Art\. 15|GDPR/);
    const gdprPage = await pageOf(gdpr.request_id);
    expect(gdprPage.data.information).toEqual({ gdpr: productionConfig.accessNotice.gdpr });
    expect(gdprPage.html).toContain('(Art. 15(2))');
    expect(gdprPage.html).toContain(productionConfig.accessNotice.gdpr.transfers);
    expect(gdprPage.html).not.toContain('§1798.110');
  });
});

describe('an access request', () => {
  it('ends with the platform archive and the subject package stored, hashed and recorded', async () => {
    harness = await startHarness({
      config: {
        controllerName: 'Example News Ltd',
        controllerContact: 'privacy@example.com',
        packageLanguage: 'en-GB',
      },
    });
    const h = harness;
    const request = requestFor('u-alice');

    const results = await submitAndSettle(h, request);

    const result = results.get(request.request_id);
    expect(result?.status).toBe('SUCCEEDED');
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported' });
    const archive = item.archive;
    const facts = item.subject_package;
    if (archive === undefined || facts === undefined) throw new Error('both packages must be recorded');
    expect(facts).toMatchObject({
      key: packageKey(request.request_id),
      file_name: expect.stringMatching(/^your-data-\d{4}-\d{2}-\d{2}\.zip$/),
      conversation_details: 'complete',
    });

    // Stored, and its bytes match the ledger's SHA-256.
    const packageZip = await stored(h, facts.key);
    expect(sha256(packageZip)).toBe(facts.sha256);
    expect(packageZip.length).toBe(facts.bytes);
    expect(sha256(await stored(h, archive.key))).toBe(archive.sha256);

    // The platform's files inside, untouched: the same bytes as in the verified archive.
    const inside = await unzip(packageZip);
    const original = await unzip(await stored(h, archive.key));
    for (const name of ['dislikes.json', 'likes.json', 'messages.json', 'profile.json']) {
      expect(inside.get(`platform/${name}`)?.equals(original.get(name) ?? Buffer.alloc(1))).toBe(true);
    }
    const html = inside.get('index.html')?.toString('utf8') ?? '';
    expect(html).toContain('City budget approved');
    // The account's settings, read with retrieve-user: Alice turned off e-mails for mentions.
    expect(facts).toMatchObject({ settings_source: 'account' });
    expect(html).toContain('<dt>By e-mail: Someone mentioned you</dt><dd>never sent</dd>');
    expect(html).toContain('<dt>By e-mail: Someone replied to your comment</dt><dd>sent at once</dd>');
    // Who answers, from the stack config, and the date of the request in its language.
    expect(html).toContain('<dt>Answered by</dt><dd>Example News Ltd</dd>');
    expect(html).toContain('<time datetime="2026-11-20T09:00:00.000Z">20 November 2026</time>');
    expect(html).toContain('https://news.example.com/2024/01/city-budget');
    const data = subjectPackageDataSchema.parse(JSON.parse(inside.get('data.json')?.toString('utf8') ?? ''));
    expect(data.conversation_details).toMatchObject({ status: 'complete', reason: null });
    expect(data.request.request_id).toBe(request.request_id);

    // Recorded in the audit trail, whose chain still verifies.
    const records = await h.workflow.audit.list(request.request_id);
    const built = records.find((record) => record.action === 'subject_package_built');
    expect(built?.facts).toMatchObject({
      sha256: facts.sha256,
      archive_sha256: archive.sha256,
      key: facts.key,
    });
    expect(await h.workflow.audit.verify(request.request_id)).toMatchObject({ ok: true });

    // State, logs and audit facts carry no identifier and no token.
    const outside = JSON.stringify([result?.output, result?.events, h.logs, records]);
    for (const secret of SECRETS_OF_ALICE) expect(outside).not.toContain(secret);
  });

  it('still gets its package, saying why conversation details are missing, when the activity call is not enabled', async () => {
    harness = await startHarness();
    const h = harness;
    await h.control('PUT', 'activity', { enabled: false });
    const request = requestFor('u-alice');

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item.subject_package).toMatchObject({
      conversation_details: 'unavailable',
      conversation_details_reason: 'not_enabled',
      activity_failure: 'ActivityNotEnabledError',
    });
    const inside = await unzip(await stored(h, item.subject_package?.key ?? ''));
    expect(inside.get('index.html')?.toString('utf8')).toContain(
      'the comment service has not enabled them for this site',
    );
    const records = await h.workflow.audit.list(request.request_id);
    expect(records.find((record) => record.action === 'subject_package_built')?.facts).toMatchObject({
      conversation_details: 'unavailable',
      conversation_details_reason: 'not_enabled',
    });
  });

  it('still gets its package when the activity call keeps failing, after its retries', async () => {
    let activityCalls = 0;
    harness = await startHarness({
      // Between the steps and the platform: every activity call answers 503.
      fetch: (real) => async (input, init) => {
        if (String(input).includes('/v1/user/activity')) {
          activityCalls += 1;
          return new Response('{}', { status: 503 });
        }
        return real(input, init);
      },
    });
    const h = harness;
    const request = requestFor('u-alice');

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    expect(activityCalls).toBe(3);
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'exported' });
    expect(item.subject_package).toMatchObject({
      conversation_details: 'unavailable',
      conversation_details_reason: 'unavailable',
      activity_failure: 'PlatformUnavailableError',
    });
    const inside = await unzip(await stored(h, item.subject_package?.key ?? ''));
    const html = inside.get('index.html')?.toString('utf8') ?? '';
    expect(html).toContain('the comment service did not answer, even after several tries');
    // Every comment is still there, under its conversation reference.
    expect(html).toContain('Conversation reference: conv-news-1');
  });

  it('answers a second run of the step from the ledger, building and storing nothing again', async () => {
    harness = await startHarness();
    const h = harness;
    const request = requestFor('u-alice');
    await submitAndSettle(h, request);
    const before = await h.workflow.ledger.require(request.request_id);
    await h.workflow.ledger.update(request.request_id, { status: 'running' }, ['completed']);

    const { stepDeps } = h.workflow;
    const reads: string[] = [];
    const deps = {
      ...stepDeps,
      archive: {
        ...stepDeps.archive,
        read: async (key: string, expected: Parameters<typeof stepDeps.archive.read>[1]) => {
          reads.push(`read ${key}`);
          return stepDeps.archive.read(key, expected);
        },
        storePackage: async (key: string, body: AsyncIterable<Uint8Array>, fileName: string) => {
          reads.push(`store ${key}`);
          return stepDeps.archive.storePackage(key, body, fileName);
        },
      },
    };

    const again = await STEPS.BuildPackage.run({ request_id: request.request_id }, deps);

    expect(again).toMatchObject({ key: before.subject_package?.key, sha256: before.subject_package?.sha256 });
    expect(reads).toEqual([]);
    expect(sha256(await stored(h, packageKey(request.request_id)))).toBe(before.subject_package?.sha256);
    const records = await h.workflow.audit.list(request.request_id);
    expect(records.filter((record) => record.action === 'subject_package_built')).toHaveLength(1);
  });
});

describe('an erasure request', () => {
  it('gets no subject package', async () => {
    harness = await startHarness();
    const h = harness;
    const request = requestFor('u-alice', { type: 'erasure' });

    const results = await submitAndSettle(h, request);

    expect(results.get(request.request_id)?.status).toBe('SUCCEEDED');
    const item = await h.workflow.ledger.require(request.request_id);
    expect(item).toMatchObject({ status: 'completed', outcome: 'erased' });
    expect(item.subject_package).toBeUndefined();
    await expect(stored(h, packageKey(request.request_id))).rejects.toThrow(/NoSuchKey|not exist/i);
    const records = await h.workflow.audit.list(request.request_id);
    expect(records.some((record) => record.step === 'BuildPackage')).toBe(false);
  });
});
