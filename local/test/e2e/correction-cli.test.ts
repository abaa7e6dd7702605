/**
 * The third right as a newcomer meets it, through the CLI against a serving local mode: `submit
 * --type correction --correct field=value`, the denial of an e-mail-link verification with its
 * reason, examples/correction.jsonl, a new e-mail marked as sent unverified, and the warning of
 * `svc-dsr package` about placeholder texts.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { killServer, runCli, type ServingLocal, serveLocal } from '../../../test/helpers/cli.ts';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
let workdir: string;
let dataDir: string;
let server: ServingLocal;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'svc-dsr-correction-'));
  dataDir = join(workdir, 'data');
  server = await serveLocal(dataDir);
}, 120_000);

afterAll(async () => {
  if (server !== undefined) await killServer(server, 'SIGTERM');
  await rm(workdir, { recursive: true, force: true });
});

const target = () => ['--target', 'local', '--data-dir', dataDir];

const statusSchema = z.looseObject({
  status: z.string(),
  denial: z.looseObject({ code: z.string(), reason: z.string().optional() }).optional(),
  correction: z
    .looseObject({ outcome: z.string(), email_sent_unverified: z.boolean().optional() })
    .optional(),
  subject_package: z.looseObject({ placeholder_texts: z.array(z.string()).optional() }).optional(),
});

async function statusJson(requestId: string): Promise<z.infer<typeof statusSchema>> {
  const result = await runCli(['status', requestId, '--json', ...target()]);
  expect(result.code, result.stderr).toBe(0);
  return statusSchema.parse(JSON.parse(result.stdout));
}

async function settled(requestId: string, timeoutMs = 60_000): Promise<z.infer<typeof statusSchema>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const item = await statusJson(requestId);
    if (['completed', 'failed', 'denied', 'rejected', 'cancelled'].includes(item.status)) return item;
    if (Date.now() > deadline) throw new Error(`request still ${item.status}`);
    await delay(300);
  }
}

function correctionFlags(requestId: string, method: string, corrections: readonly string[]): string[] {
  return [
    'submit',
    '--request-id',
    requestId,
    '--type',
    'correction',
    '--regulation',
    'gdpr',
    '--primary-key',
    'u-alice',
    '--received-at',
    new Date(Date.now() - 3600_000).toISOString(),
    '--verification-method',
    method,
    '--verified-by',
    'privacy-team',
    '--verified-at',
    new Date(Date.now() - 1800_000).toISOString(),
    ...corrections.flatMap((pair) => ['--correct', pair]),
    ...target(),
  ];
}

/** Everything the audit trail holds for a request, as the files local mode keeps. */
async function auditRecords(requestId: string): Promise<{ text: string; records: unknown[] }> {
  const dir = join(dataDir, 's3', 'svc-dsr-audit', 'audit', requestId);
  const names = (await readdir(dir)).filter((name) => name.endsWith('.json')).sort();
  const texts = await Promise.all(names.map((name) => readFile(join(dir, name), 'utf8')));
  return { text: texts.join('\n'), records: texts.map((text) => JSON.parse(text)) };
}

describe('submit --help', () => {
  it('offers --type correction and --correct field=value, with an example', async () => {
    const help = await runCli(['submit', '--help']);
    const text = help.stdout.replace(/\s+/g, ' ');

    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--type <type>\s+access, erasure or correction/);
    expect(help.stdout).toMatch(/--correct <field=value>\s+with --type correction/);
    expect(text).toContain('user_name, display_name, email, location, bio, image_url');
    expect(help.stdout).toContain('--correct location=Lisbon');
    expect(help.stdout).not.toContain('access or erasure');
  });
});

describe('a correction submitted with --correct', () => {
  it('corrects the profile, never printing the values', async () => {
    // Prepare
    const requestId = randomUUID();

    // Act
    const submitted = await runCli(
      correctionFlags(requestId, 'account_login', ['display_name=Zebulon Qwerty', 'location=Ulaanbaatar']),
    );
    const item = await settled(requestId);
    const shown = await runCli(['status', requestId, ...target()]);

    // Assess
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stdout.trim()).toBe(requestId);
    expect(item.status).toBe('completed');
    expect(item.correction?.outcome).toBe('corrected');
    expect(shown.stdout).toMatch(/corrects\s+display_name, location/);
    const printed = `${submitted.stdout}${submitted.stderr}${shown.stdout}${shown.stderr}${server.stderr()}`;
    expect(printed).not.toContain('Zebulon');
    expect(printed).not.toContain('Ulaanbaatar');
  }, 90_000);

  it('refuses a --correct without "=", a field given twice and a bad value, as usage errors that quote no value', async () => {
    const noEquals = await runCli(correctionFlags(randomUUID(), 'account_login', ['Secret-Value']));
    const twice = await runCli(correctionFlags(randomUUID(), 'account_login', ['bio=one', 'bio=two']));
    const bad = await runCli(correctionFlags(randomUUID(), 'account_login', ['email=not-an-address']));
    const missing = await runCli(correctionFlags(randomUUID(), 'account_login', []));

    expect(noEquals.code).toBe(2);
    expect(noEquals.stderr).toContain('--correct takes field=value');
    expect(noEquals.stderr).not.toContain('Secret-Value');
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('--correct names bio twice');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--correct email=: must be an e-mail address');
    expect(bad.stderr).not.toContain('not-an-address');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--correct: is required for a correction request');
  }, 60_000);

  it('is denied when verified by email_link, and submit and status say why and which methods are accepted', async () => {
    // Prepare
    const requestId = randomUUID();

    // Act
    const submitted = await runCli(correctionFlags(requestId, 'email_link', ['display_name=Ada L.']));
    const item = await settled(requestId);
    const shown = await runCli(['status', requestId, ...target()]);

    // Assess
    const why =
      'a link sent to the address on file proves control of that address, which a correction may replace; this stack accepts account_login, authorized_agent, id_document for correction requests';
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(item.status).toBe('denied');
    expect(item.denial?.code).toBe('identity_not_verified');
    expect(item.denial?.reason).toContain(why);
    expect(submitted.stderr).toContain(
      `submit: request ${requestId} was denied at intake: identity_not_verified:`,
    );
    expect(submitted.stderr).toContain(why);
    expect(shown.stdout).toContain(why);
  }, 90_000);

  it('marks a new e-mail as sent unverified in the ledger, the audit record and status, never the address', async () => {
    // Prepare
    const requestId = randomUUID();
    const address = 'zq.newaddress@example.net';

    // Act
    const submitted = await runCli(correctionFlags(requestId, 'id_document', [`email=${address}`]));
    const item = await settled(requestId);
    const shown = await runCli(['status', requestId, ...target()]);
    const audit = await auditRecords(requestId);

    // Assess
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(item.status).toBe('completed');
    expect(item.correction?.email_sent_unverified).toBe(true);
    expect(shown.stdout).toMatch(/new e-mail\s+sent to the platform as unverified/);
    const corrected = audit.records.find(
      (record) => z.looseObject({ action: z.string() }).parse(record).action === 'subject_corrected',
    );
    expect(corrected).toMatchObject({ facts: { email_sent_unverified: true, email_verified_after: false } });
    for (const text of [audit.text, shown.stdout, shown.stderr, submitted.stderr, server.stderr()]) {
      expect(text).not.toContain(address);
    }
  }, 90_000);

  it('leaves out the mark when the correction does not touch the e-mail', async () => {
    const requestId = randomUUID();
    const submitted = await runCli(correctionFlags(requestId, 'account_login', ['bio=Writes code.']));
    const item = await settled(requestId);
    const shown = await runCli(['status', requestId, ...target()]);

    expect(submitted.code, submitted.stderr).toBe(0);
    expect(item.correction?.email_sent_unverified).toBeUndefined();
    expect(shown.stdout).not.toContain('new e-mail');
  }, 90_000);
});

describe('examples/correction.jsonl', () => {
  it('is accepted and corrects the profile when submitted through the CLI', async () => {
    // Act
    const submitted = await runCli([
      'submit',
      '--file',
      join(ROOT, 'examples/correction.jsonl'),
      ...target(),
    ]);

    // Assess
    expect(submitted.code, submitted.stderr).toBe(0);
    const [requestId = ''] = submitted.stdout.trim().split('\n');
    const item = await settled(requestId);
    expect(item).toMatchObject({ status: 'completed', correction: { outcome: 'corrected' } });
  }, 90_000);
});

describe('svc-dsr package in local mode without settings', () => {
  it('records the placeholder texts of the package and warns, naming the unset settings and where to set them', async () => {
    // Prepare: an access request, answered with the package built from the placeholders.
    const requestId = randomUUID();
    const submitted = await runCli([
      'submit',
      '--request-id',
      requestId,
      '--type',
      'access',
      '--regulation',
      'gdpr',
      '--primary-key',
      'u-dan',
      '--received-at',
      new Date(Date.now() - 3600_000).toISOString(),
      '--verification-method',
      'email_link',
      '--verified-by',
      'privacy-team',
      '--verified-at',
      new Date(Date.now() - 1800_000).toISOString(),
      ...target(),
    ]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const item = await settled(requestId);
    expect(item.status, JSON.stringify(item)).toBe('completed');

    // Act
    const handed = await runCli(['package', requestId, '--out', join(workdir, 'dan.zip'), ...target()]);

    // Assess
    expect(handed.code, handed.stderr).toBe(0);
    expect(item.subject_package?.placeholder_texts).toEqual([
      'controllerName',
      'controllerContact',
      'accessNotice.gdpr.purposes',
      'accessNotice.gdpr.categories',
      'accessNotice.gdpr.recipients',
      'accessNotice.gdpr.retention',
      'accessNotice.gdpr.rights',
      'accessNotice.gdpr.complaint',
      'accessNotice.gdpr.source',
      'accessNotice.gdpr.automatedDecisions',
      'accessNotice.gdpr.transfers',
    ]);
    expect(handed.stderr).toContain('package: warning: this package states placeholder texts, not yours:');
    expect(handed.stderr).toContain('controllerName, controllerContact, accessNotice.gdpr.purposes');
    expect(handed.stderr).toContain(
      'cdk.json context "svc-dsr", or the file given to --config; docs/deploy.md',
    );
  }, 120_000);
});
