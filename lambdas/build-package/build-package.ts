// The BuildPackage step: the subject's own package built from the verified archive and stored beside it.
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { AuditChainClosedError, LedgerStateError, RequestCancelledError } from '#shared/errors';
import type { SubjectPackageFacts } from '#shared/ledger';
import { rfc3339Instant } from '#shared/request';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest } from '#shared/step-guards';
import { type PackageOutput, packageOutputSchema, stepInputSchema } from '#shared/step-io';
import { collectAccount } from './account.ts';
import { ACTIVITY_READ_BUDGET_SECONDS, collectActivity } from './activity.ts';
import {
  loadWork,
  PACKAGE_WRITE_MARGIN_MS,
  packageContinuationSchema,
  removeWork,
  saveWork,
} from './continuation.ts';
import { type PackageSource, packageFileName, packageZipStream } from './package-zip.ts';
import type { PackageHead } from './render.ts';
import { PACKAGE_PLACEHOLDERS, placeholderTexts } from './settings.ts';
import { openZip, streamedExport } from './streamed-export.ts';
import { measured } from './streams.ts';

/** The subject package's object key: beside the archive, built from request_id only. */
export function packageKey(requestId: string): string {
  return `exports/${requestId}/subject-package.zip`;
}

/** BuildPackage's input: the request, and on a continued build what the pass before stored. */
export const packageStepInputSchema = stepInputSchema.extend({
  continuation: packageContinuationSchema.optional(),
});
export type PackageStepInput = z.infer<typeof packageStepInputSchema>;

/** The package built, or a continuation: the state machine runs the step again with it. */
export const packageStepOutputSchema = z.union([
  packageOutputSchema,
  z.strictObject({ continuation: packageContinuationSchema }),
]);
export type PackageStepOutput = z.infer<typeof packageStepOutputSchema>;

/**
 * Builds the subject's own package from the verified archive (re-checked against the ledger's
 * SHA-256 as it is read), with conversation context from the activity call, and stores it beside
 * the archive. Idempotent: a package the ledger records is answered as it is. Access requests only.
 * When the invocation has too little time left after ordering the lists to write the zip
 * (`deps.remainingTimeMs`), it stores its work and answers a continuation (continuation.ts).
 */
export async function buildSubjectPackage(
  input: PackageStepInput,
  deps: StepDeps,
): Promise<PackageStepOutput> {
  const item = await activeRequest(deps, input.request_id).catch(async (error: unknown) => {
    // A request that ended between two passes keeps no copy of the subject's data in the work.
    if (
      input.continuation !== undefined &&
      (error instanceof RequestCancelledError || error instanceof LedgerStateError)
    ) {
      const removed = await removeWork(input.request_id, deps.archive);
      deps.logger.info('subject package work removed: the request ended between two passes', { removed });
    }
    throw error;
  });
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
  const placeholders = placeholderTexts(settings, regulation);
  const key = packageKey(item.request_id);
  const readArchive = async (dir: string) => {
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
    return archivePath;
  };
  const store = async (source: PackageSource, fileName: string) => {
    const measuredZip = measured(packageZipStream(source), 'package');
    const { versionId } = await deps.archive.storePackage(key, measuredZip.body, fileName);
    return { versionId, ...measuredZip.result() };
  };

  if (input.continuation !== undefined) {
    const continuation = input.continuation;
    const built = await withScratchDir(async (dir) => {
      const work = await loadWork(item.request_id, continuation, dir, deps.archive);
      if (work.manifest.archive_sha256 !== archive.sha256) {
        throw new LedgerStateError(
          'the stored package work was read from another archive than the ledger records',
        );
      }
      const zip = await openZip(await readArchive(dir));
      try {
        const source: PackageSource = {
          head: work.manifest.head,
          counts: work.manifest.counts,
          comments: work.comments,
          votes: work.votes,
          platformFile: (name) => zip.open(name),
        };
        return { manifest: work.manifest, ...(await store(source, work.manifest.file_name)) };
      } finally {
        zip.file.close();
      }
    });
    const { manifest, versionId, bytes, sha256 } = built;
    return await recordPackage(item.request_id, deps, {
      key,
      bytes,
      sha256,
      versionId,
      fileName: manifest.file_name,
      builtAt: manifest.head.request.answered_at,
      archiveSha256: archive.sha256,
      details: manifest.head.conversation_details,
      activityFailure: manifest.activity_failure,
      settingsSource: manifest.head.settings_source,
      accountFailure: manifest.account_failure,
      placeholders,
      passes: continuation.pass,
    });
  }

  const answeredAt = deps.clock();
  const fileName = packageFileName(answeredAt, settings.timeZone);
  const built = await withScratchDir(async (dir) => {
    const archivePath = await readArchive(dir);
    const account = await collectAccount(deps.platform, item.primary_key);
    const clock = () => deps.clock().getTime();
    const activity = await collectActivity(deps.platform, item.svc_user_id, {
      sleep: deps.sleep,
      clock,
      readUntil: clock() + ACTIVITY_READ_BUDGET_SECONDS * 1000,
    });
    const orderingStarted = performance.now();
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
      // Writing takes about two thirds of the ordering's time: with less than all of it left
      // (and a margin), the zip is written by another invocation from the stored work.
      const ordering = performance.now() - orderingStarted;
      const remaining = deps.remainingTimeMs?.();
      if (remaining !== undefined && remaining < ordering + PACKAGE_WRITE_MARGIN_MS) {
        const continuation = await saveWork(
          item.request_id,
          source,
          {
            archive_sha256: archive.sha256,
            file_name: fileName,
            account_failure: account.failure,
            activity_failure: activity.failure,
          },
          deps.archive,
        );
        return { continued: true, continuation } as const;
      }
      return {
        continued: false,
        account,
        activity,
        head: source.head,
        ...(await store(source, fileName)),
      } as const;
    } finally {
      await close();
    }
  });
  if (built.continued) {
    deps.logger.info('subject package continues in another invocation', {
      pass: built.continuation.pass,
      remaining_ms: deps.remainingTimeMs?.() ?? null,
    });
    return { continuation: built.continuation };
  }
  const { account, activity, head: data, versionId, bytes, sha256 } = built;
  return await recordPackage(item.request_id, deps, {
    key,
    bytes,
    sha256,
    versionId,
    fileName,
    builtAt: answeredAt.toISOString(),
    archiveSha256: archive.sha256,
    details: activity.context.details,
    activityFailure: activity.failure,
    settingsSource: data.settings_source,
    accountFailure: account.failure,
    placeholders,
    passes: 1,
  });
}

/** What a built package is recorded with, whichever pass wrote it. */
interface BuiltPackage {
  readonly key: string;
  readonly bytes: number;
  readonly sha256: string;
  readonly versionId: string | undefined;
  readonly fileName: string;
  readonly builtAt: string;
  readonly archiveSha256: string;
  readonly details: PackageHead['conversation_details'];
  readonly activityFailure: string | null;
  readonly settingsSource: PackageHead['settings_source'];
  readonly accountFailure: string | null;
  /** The settings it states that are still on their placeholder (placeholderTexts). */
  readonly placeholders: readonly string[];
  readonly passes: number;
}

/** Records the package in the ledger and the audit trail, and removes a continued build's work. */
async function recordPackage(requestId: string, deps: StepDeps, built: BuiltPackage): Promise<PackageOutput> {
  const { key, sha256, versionId, fileName, details } = built;
  const facts: SubjectPackageFacts = {
    key,
    bytes: built.bytes,
    sha256,
    ...(versionId === undefined ? {} : { version_id: versionId }),
    file_name: fileName,
    built_at: built.builtAt,
    conversation_details: details.status,
    ...(details.reason === null ? {} : { conversation_details_reason: details.reason }),
    ...(built.activityFailure === null ? {} : { activity_failure: built.activityFailure }),
    settings_source: built.settingsSource,
    ...(built.accountFailure === null ? {} : { account_failure: built.accountFailure }),
    ...(built.placeholders.length === 0 ? {} : { placeholder_texts: [...built.placeholders] }),
  };
  try {
    await deps.ledger.update(requestId, { subject_package: facts }, ['running']);
  } catch (error) {
    if (error instanceof RequestCancelledError) {
      await removeCancelledPackage(requestId, key, deps);
      if (built.passes > 1) await removeWork(requestId, deps.archive);
    }
    throw error;
  }
  // The work a continued build stored is not needed once the package is recorded.
  if (built.passes > 1) await removeWork(requestId, deps.archive);
  await deps.audit.append(requestId, {
    eventId: 'BuildPackage',
    step: 'BuildPackage',
    action: 'subject_package_built',
    facts: {
      key,
      bytes: facts.bytes,
      sha256,
      version_id: versionId ?? null,
      file_name: fileName,
      archive_sha256: built.archiveSha256,
      conversation_details: details.status,
      conversation_details_reason: details.reason,
      activity_pages: details.pages,
      activity_failure: built.activityFailure,
      settings_source: built.settingsSource,
      account_failure: built.accountFailure,
      // How many, since a fact is at most 256 characters: the ledger names them.
      ...(built.placeholders.length === 0 ? {} : { placeholder_texts: built.placeholders.length }),
      ...(built.passes > 1 ? { passes: built.passes } : {}),
    },
  });
  deps.logger.info('subject package built', {
    key,
    bytes: facts.bytes,
    sha256,
    conversation_details: details.status,
    conversation_details_reason: details.reason,
    activity_failure: built.activityFailure,
    settings_source: built.settingsSource,
    account_failure: built.accountFailure,
    passes: built.passes,
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
export async function withScratchDir<T>(work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-dsr-package-'));
  try {
    return await work(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The BuildPackage step: contract and domain function. */
export const buildPackageStep = {
  name: 'BuildPackage',
  input: packageStepInputSchema,
  output: packageStepOutputSchema,
  run: buildSubjectPackage,
} as const;
