import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import {
  AuditChainClosedError,
  LedgerStateError,
  RequestCancelledError,
  StorageAnswerInvalidError,
} from '#shared/errors';
import type { SubjectPackageFacts } from '#shared/ledger';
import { rfc3339Instant } from '#shared/request';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest } from '#shared/step-guards';
import { type PackageOutput, packageOutputSchema, type StepInput, stepInputSchema } from '#shared/step-io';
import { collectAccount } from './account.ts';
import { ACTIVITY_READ_BUDGET_SECONDS, collectActivity } from './activity.ts';
import { packageFileName, packageZipStream } from './package-zip.ts';
import { PACKAGE_PLACEHOLDERS } from './settings.ts';
import { streamedExport } from './streamed-export.ts';

/** The subject package's object key: beside the archive, built from request_id only. */
export function packageKey(requestId: string): string {
  return `exports/${requestId}/subject-package.zip`;
}

/**
 * Builds the subject's own package from the verified archive (re-checked against the ledger's
 * SHA-256 as it is read), with conversation context from the activity call, and stores it beside
 * the archive. Idempotent: a package the ledger records is answered as it is. Access requests only.
 */
export async function buildSubjectPackage(input: StepInput, deps: StepDeps): Promise<PackageOutput> {
  const item = await activeRequest(deps, input.request_id);
  if (item.subject_package !== undefined) return outputOf(item.subject_package);
  if (item.type !== 'access') {
    throw new LedgerStateError('only an access request gets a subject package; this request is not one');
  }
  const archive = item.archive;
  if (archive === undefined) throw new LedgerStateError('the export has not been archived yet');
  // RFC 3339 as intake accepted it: a lower-case t or z, a leap second.
  const receivedAt = item.received_at === undefined ? undefined : rfc3339Instant(item.received_at);
  const regulation = item.regulation;
  if (receivedAt === undefined || regulation === undefined) {
    throw new LedgerStateError('the ledger item lacks the request facts a package states');
  }
  const settings = deps.subjectPackage ?? { ...PACKAGE_PLACEHOLDERS, timeZone: 'UTC' };
  const answeredAt = deps.clock();

  const key = packageKey(item.request_id);
  const fileName = packageFileName(answeredAt, settings.timeZone);
  const built = await withScratchDir(async (dir) => {
    // The archive goes to local disk as it is checked against the ledger's SHA-256; nothing is
    // parsed before the whole of it matched. Then its entries are read as often as needed.
    const archivePath = join(dir, 'archive.zip');
    await pipeline(
      await deps.archive.read(archive.key, {
        bytes: archive.bytes,
        sha256: archive.sha256,
        ...(archive.version_id === undefined ? {} : { versionId: archive.version_id }),
      }),
      createWriteStream(archivePath),
    );
    const account = await collectAccount(deps.platform, item.primary_key);
    const clock = () => deps.clock().getTime();
    const activity = await collectActivity(deps.platform, item.svc_user_id, {
      sleep: deps.sleep,
      clock,
      readUntil: clock() + ACTIVITY_READ_BUDGET_SECONDS * 1000,
    });
    const { source, close } = await streamedExport(archivePath, dir, {
      account: account.settings,
      activity: activity.context,
      controller: { name: settings.controllerName, contact: settings.controllerContact },
      // The subject's own law only: a CCPA consumer is told what §1798.110 says, in its words.
      information:
        regulation === 'ccpa' ? { ccpa: settings.information.ccpa } : { gdpr: settings.information.gdpr },
      language: settings.language,
      timeZone: settings.timeZone,
      request: {
        request_id: item.request_id,
        regulation,
        received_at: receivedAt.toISOString(),
        answered_at: answeredAt.toISOString(),
      },
    });
    try {
      const measured = measure(packageZipStream(source));
      const { versionId } = await deps.archive.storePackage(key, measured.body, fileName);
      return { account, activity, head: source.head, versionId, ...measured.result() };
    } finally {
      await close();
    }
  });
  const { account, activity, head: data, versionId, bytes, sha256 } = built;
  const details = activity.context.details;
  const facts: SubjectPackageFacts = {
    key,
    bytes,
    sha256,
    ...(versionId === undefined ? {} : { version_id: versionId }),
    file_name: fileName,
    built_at: answeredAt.toISOString(),
    conversation_details: details.status,
    ...(details.reason === null ? {} : { conversation_details_reason: details.reason }),
    ...(activity.failure === null ? {} : { activity_failure: activity.failure }),
    settings_source: data.settings_source,
    ...(account.failure === null ? {} : { account_failure: account.failure }),
  };
  try {
    await deps.ledger.update(item.request_id, { subject_package: facts }, ['running']);
  } catch (error) {
    if (error instanceof RequestCancelledError) await removeCancelledPackage(item.request_id, key, deps);
    throw error;
  }
  await deps.audit.append(item.request_id, {
    eventId: 'BuildPackage',
    step: 'BuildPackage',
    action: 'subject_package_built',
    facts: {
      key,
      bytes: facts.bytes,
      sha256,
      version_id: versionId ?? null,
      file_name: fileName,
      archive_sha256: archive.sha256,
      conversation_details: details.status,
      conversation_details_reason: details.reason,
      activity_pages: details.pages,
      activity_failure: activity.failure,
      settings_source: data.settings_source,
      account_failure: account.failure,
    },
  });
  deps.logger.info('subject package built', {
    key,
    bytes: facts.bytes,
    sha256,
    conversation_details: details.status,
    conversation_details_reason: details.reason,
    activity_failure: activity.failure,
    settings_source: data.settings_source,
    account_failure: account.failure,
  });
  return outputOf(facts);
}

function outputOf(facts: SubjectPackageFacts): PackageOutput {
  return {
    key: facts.key,
    bytes: facts.bytes,
    sha256: facts.sha256,
    conversation_details: facts.conversation_details,
  };
}

/** The request was cancelled while the package was built: no copy of the subject's data stays. */
async function removeCancelledPackage(requestId: string, key: string, deps: StepDeps): Promise<void> {
  const versions = await deps.archive.remove(key);
  try {
    await deps.audit.append(requestId, {
      eventId: `BuildPackage:removed:${key}`,
      step: 'BuildPackage',
      action: 'subject_package_removed',
      facts: { key, versions, reason: 'request_cancelled' },
    });
  } catch (error) {
    if (!(error instanceof AuditChainClosedError)) throw error;
  }
  deps.logger.info('subject package removed: the request was cancelled during the build', { key, versions });
}

/**
 * Runs `work` with a fresh folder on local disk (Lambda's /tmp) for the archive and the sorts'
 * runs, and removes it whatever happens: the subject's data does not stay on the machine.
 */
async function withScratchDir<T>(work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-dsr-package-'));
  try {
    return await work(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The zip's bytes on their way to S3, counted and hashed. */
function measure(zip: AsyncIterable<Uint8Array>): {
  body: AsyncIterable<Uint8Array>;
  result(): { bytes: number; sha256: string };
} {
  const hash = createHash('sha256');
  let bytes = 0;
  let done = false;
  return {
    body: (async function* () {
      for await (const chunk of zip) {
        hash.update(chunk);
        bytes += chunk.byteLength;
        yield chunk;
      }
      done = true;
    })(),
    result() {
      // A store that answered before reading the whole body would record a wrong SHA-256.
      if (!done)
        throw new StorageAnswerInvalidError('the package store returned before it read the whole package');
      return { bytes, sha256: hash.digest('hex') };
    },
  };
}

/** The BuildPackage step: contract and domain function. */
export const buildPackageStep = {
  name: 'BuildPackage',
  input: stepInputSchema,
  output: packageOutputSchema,
  run: buildSubjectPackage,
} as const;
