/**
 * The only reads of a subject's archive or package that a person can cause: a hand-out (a presigned
 * link, signed by this function's role, answered only once its `package_handed_out` record is
 * locked) and a re-hash for `svc-dsr verify` (the bytes never leave the function; only their size
 * and SHA-256 do). The privacy team's own policy has no read of archive objects (docs/security.md).
 */
import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { hashStoredObject } from '#shared/archive';
import { sideChainOf } from '#shared/audit';
import { InvalidArchiveError } from '#shared/errors';
import type { LedgerItem } from '#shared/ledger';
import { DOWNLOAD_LINK_SECONDS, type OperatorCommand, type OperatorResult } from './commands.ts';
import { type OperatorDeps, OperatorRefusal, recordAction } from './records.ts';

type Of<C extends OperatorCommand['command']> = Extract<OperatorCommand, { command: C }>;

/** What is handed out: the object the ledger recorded, which kind it is, and the name it saves as. */
interface Handed {
  readonly kind: 'subject_package' | 'platform_archive';
  readonly key: string;
  readonly bytes: number;
  readonly sha256: string;
  readonly versionId: string | undefined;
  readonly fileName: string;
}

/**
 * Hands out a completed request's subject package (or with `raw` its platform archive): checks the
 * recorded version is in the bucket at its recorded size, signs a GET of it, and records the
 * hand-out in the request's packages chain (who, how, until when, which object, why). The link is
 * answered only once that record is written: no record, no hand-out. What goes out is read from
 * the ledger, never from the command, and the link itself is in no record and no log line.
 */
export async function handOutPackage(
  deps: OperatorDeps,
  operator: string,
  command: Of<'hand_out_package'>,
): Promise<OperatorResult<'hand_out_package'>> {
  const { request_id: requestId, hand_out: handOut, reason } = command;
  const item = await deps.ledger.get(requestId);
  if (item === undefined)
    throw new OperatorRefusal('unknown_request', `no request ${requestId} in the ledger`);
  const handed = packageToHandOut(item, command.raw, reason);
  const location = {
    Bucket: deps.names.ArchiveBucketName,
    Key: handed.key,
    ...(handed.versionId === undefined ? {} : { VersionId: handed.versionId }),
  };
  // A link never points at nothing, nor at an object other than the one the ledger recorded.
  const head = await deps.s3.send(new HeadObjectCommand(location)).catch((error: unknown) => {
    if (isGone(error)) throw new OperatorRefusal('refused', goneMessage(requestId, handed));
    throw error;
  });
  if (head.ContentLength !== handed.bytes) {
    throw new OperatorRefusal(
      'refused',
      `the stored ${label(handed)} is ${head.ContentLength ?? 'of unknown size'} bytes, the ledger says ${handed.bytes}; run npx svc-dsr verify ${requestId}`,
    );
  }
  const asked = handOut.delivery === 'link' ? handOut.expires_in : DOWNLOAD_LINK_SECONDS;
  const now = deps.clock();
  const seconds = await linkSeconds(deps, asked, now);
  const url = await getSignedUrl(
    deps.s3,
    new GetObjectCommand({
      ...location,
      // The subject's browser saves it as your-data-<date>.zip, whatever the key.
      ...(handed.kind === 'subject_package'
        ? { ResponseContentDisposition: `attachment; filename="${handed.fileName}"` }
        : {}),
    }),
    { expiresIn: seconds },
  );
  const expiresAt = new Date(now.getTime() + seconds * 1000).toISOString();
  await recordAction(
    deps,
    operator,
    requestId,
    {
      eventId: `Operator:package-${handOut.delivery}-${now.toISOString()}`,
      action: 'package_handed_out',
      facts: {
        type: item.type ?? null,
        package: handed.kind,
        delivery: handOut.delivery,
        link_expires_at: expiresAt,
        // The CLI writes the copy readable only by the operator; its path (often the subject's
        // name) is never sent.
        ...(handOut.delivery === 'file' ? { file_mode: '0600' } : {}),
        key: handed.key,
        version_id: handed.versionId ?? null,
        bytes: handed.bytes,
        sha256: handed.sha256,
      },
      ...(reason === undefined ? {} : { reason }),
    },
    { chain: sideChainOf('packages', requestId), done: `nothing was handed out for ${requestId}` },
  );
  return {
    request_id: requestId,
    package: handed.kind,
    file_name: handed.fileName,
    url,
    expires_at: expiresAt,
    key: handed.key,
    version_id: handed.versionId ?? null,
    bytes: handed.bytes,
    sha256: handed.sha256,
    recorded: true,
  };
}

/**
 * The link's lifetime: as asked, but never past the signing credentials' own expiry when the SDK
 * knows it (a presigned link dies with the session that signed it), so `expires_at` is true.
 */
async function linkSeconds(deps: OperatorDeps, asked: number, now: Date): Promise<number> {
  const identity = await deps.s3.config.credentials();
  if (identity.expiration === undefined) return asked;
  const left = Math.floor((identity.expiration.getTime() - now.getTime()) / 1000);
  if (left < 1) {
    throw new OperatorRefusal(
      'refused',
      "the operator function's credentials have expired; ask again in a moment (Lambda renews them)",
    );
  }
  return Math.min(asked, left);
}

/**
 * Re-hashes the stored archive or subject package of a request at the key the ledger records, for
 * `svc-dsr verify`: the size and SHA-256 of what the bucket holds, or null when it holds nothing
 * there. The verdict (match, mismatch, expired, missing) is the CLI's, from the ledger and the chain.
 */
export async function checkStored(
  deps: OperatorDeps,
  command: Of<'check_stored'>,
): Promise<OperatorResult<'check_stored'>> {
  const { request_id: requestId, object } = command;
  const item = await deps.ledger.get(requestId);
  if (item === undefined)
    throw new OperatorRefusal('unknown_request', `no request ${requestId} in the ledger`);
  const recorded = object === 'archive' ? item.archive : item.subject_package;
  if (recorded === undefined) return { request_id: requestId, object, key: null, stored: null };
  try {
    const stored = await hashStoredObject({
      s3: deps.s3,
      bucket: deps.names.ArchiveBucketName,
      key: recorded.key,
    });
    return { request_id: requestId, object, key: recorded.key, stored };
  } catch (error) {
    const gone =
      (error instanceof InvalidArchiveError && error.message.includes('missing')) ||
      (error instanceof Error && error.name === 'NoSuchKey');
    if (gone) return { request_id: requestId, object, key: recorded.key, stored: null };
    throw error;
  }
}

/**
 * The package to hand out, or the refusal saying why not: only a completed request's. By default
 * the subject package (an access request's); with `raw` the platform archive, an erasure
 * request's only with a reason (its archive is the subject's data taken before erasure).
 */
export function packageToHandOut(item: LedgerItem, raw: boolean, reason: string | undefined): Handed {
  const refuse = (message: string) => new OperatorRefusal('refused', message);
  if (item.status !== 'completed') {
    throw refuse(
      `request ${item.request_id} is ${item.status}; a package exists only for a completed request`,
    );
  }
  if (!raw) {
    if (item.type === 'erasure') {
      throw refuse(
        `request ${item.request_id} is an erasure: it has no subject package. Its platform archive (the subject's data taken before erasure) is handed out only with --raw and --reason`,
      );
    }
    const built = item.subject_package;
    if (built === undefined) {
      throw refuse(
        `request ${item.request_id} has no subject package (outcome ${item.outcome ?? 'unknown'}${item.archive === undefined ? '' : '; it completed before subject packages were built'}): ${item.archive === undefined ? 'there is nothing to hand over' : 'hand out the platform archive with --raw'}`,
      );
    }
    return {
      kind: 'subject_package',
      key: built.key,
      bytes: built.bytes,
      sha256: built.sha256,
      versionId: built.version_id,
      fileName: built.file_name,
    };
  }
  const archive = item.archive;
  if (archive === undefined) {
    throw refuse(
      `request ${item.request_id} has no archive (outcome ${item.outcome ?? 'unknown'}): there is nothing to hand over`,
    );
  }
  if (item.type === 'erasure' && reason === undefined) {
    throw refuse(
      `request ${item.request_id} is an erasure: its archive is the copy of the subject's data taken before it was erased; hand it out only with --reason saying why (kept in the audit record)`,
    );
  }
  return {
    kind: 'platform_archive',
    key: archive.key,
    bytes: archive.bytes,
    sha256: archive.sha256,
    versionId: archive.version_id,
    fileName: archive.key.split('/').at(-1) ?? 'archive.zip',
  };
}

function label(handed: Handed): string {
  return handed.kind === 'subject_package' ? 'subject package' : 'archive';
}

function goneMessage(requestId: string, handed: Handed): string {
  return `the ${label(handed)} of request ${requestId} (${handed.key}) is no longer in the bucket; the lifecycle rule may have expired it`;
}

function isGone(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error.name === 'NotFound' || error.name === 'NoSuchKey' || error.name === 'NoSuchVersion')
  );
}
