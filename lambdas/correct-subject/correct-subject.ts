// The CorrectSubject step: applies the requested corrections to the subject's profile and checks them.
import { isDeepStrictEqual } from 'node:util';
import {
  LedgerStateError,
  PlatformResponseInvalidError,
  ProfileChangedConcurrentlyError,
  SubjectNotFoundError,
} from '#shared/errors';
import { type ProfileUpdate, UPDATE_QUERY_FIELDS } from '#shared/platform-client';
import type { RetrievedUser } from '#shared/platform-schemas';
import { type CorrectableField, type Corrections, correctionFields } from '#shared/profile-fields';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest, recordingSideEffect, runOfExecution } from '#shared/step-guards';
import { type CorrectOutput, correctOutputSchema, type StepInput, stepInputSchema } from '#shared/step-io';

/** Times the correction is made when the re-read finds the profile changed by someone else. */
export const CORRECTION_ATTEMPTS = 2;

/**
 * Corrects the subject's profile on the platform: reads it, sends it back whole with the
 * corrections applied (update-user wipes what it is not sent), reads it again and compares. A
 * profile that someone else changed meanwhile is corrected once more from a fresh read, then the
 * request fails with ProfileChangedConcurrentlyError. The values come from the ledger, where intake
 * put them, and are removed from it with the result; state, logs, errors and the audit records
 * carry field names and keyed hashes only.
 */
export async function correctSubject(input: StepInput, deps: StepDeps): Promise<CorrectOutput> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  if (item.correction !== undefined) return { outcome: item.correction.outcome };
  if (item.type !== 'correction') throw new LedgerStateError('the request is not a correction request');
  const corrections: Corrections = item.correction_values ?? {};
  const fields = correctionFields(corrections);
  if (fields.length === 0) {
    throw new LedgerStateError(
      'the correction values are no longer in the ledger (removed when the request ended): submit the correction again',
    );
  }
  await deps.ledger.updateInRun(
    input.request_id,
    runOfExecution(input.request_id, input.execution),
    { step: 'correcting' },
    ['running'],
  );

  let attempt = 1;
  for (;;) {
    const read = await readProfile(item.primary_key, deps);
    const update = fullUpdate(read, corrections);
    await recordOldValues(input.request_id, read, fields, deps);
    if (!(await deps.platform.updateUser(item.primary_key, update)).found) {
      throw new SubjectNotFoundError('the subject left the platform before it could be corrected');
    }
    const after = await readProfile(item.primary_key, deps);
    const comparison = compare(update, after, corrections);
    if (comparison.changedByOthers.length === 0) {
      return record(input.request_id, item, { sent: update, after, corrections, comparison, attempt }, deps);
    }
    deps.logger.warn('the re-read found the profile changed by someone else', {
      fields: comparison.changedByOthers,
      attempt,
    });
    if (attempt >= CORRECTION_ATTEMPTS) {
      throw new ProfileChangedConcurrentlyError(
        `the profile changed while it was being corrected, after ${attempt} attempts (fields that differ from what was sent: ${comparison.changedByOthers.join(', ')}): check the profile on the platform, then retry the request`,
      );
    }
    attempt += 1;
  }
}

async function readProfile(primaryKey: string, deps: StepDeps): Promise<RetrievedUser> {
  const read = await deps.platform.retrieveUser(primaryKey);
  if (!read.found)
    throw new SubjectNotFoundError('the subject left the platform before it could be corrected');
  return read.user;
}

/** The profile fields update-user takes (query and body): each must be read to be sent back. */
const PROFILE_FIELDS = [...UPDATE_QUERY_FIELDS, 'bio', 'role', 'settings'] as const;

/**
 * The full user data for update-user: every field as read, with the corrections applied. A field
 * the read did not return would be wiped, so the update is refused before anything is sent. A
 * corrected e-mail that differs from the current one is sent as unverified; email_verified is
 * otherwise sent back as read (the platform changes it only with the e-mail).
 */
export function fullUpdate(user: RetrievedUser, corrections: Corrections): ProfileUpdate {
  const missing = PROFILE_FIELDS.filter((field) => user[field] === undefined || user[field] === null);
  const {
    user_name: userName,
    display_name: displayName,
    email,
    email_verified: emailVerified,
    image_url: imageUrl,
    location,
    private_profile: privateProfile,
    user_metadata: userMetadata,
    bio,
    role,
    settings,
  } = user;
  if (
    missing.length > 0 ||
    userName === undefined ||
    displayName === undefined ||
    email === undefined ||
    emailVerified === undefined ||
    imageUrl === undefined ||
    location === undefined ||
    privateProfile === undefined ||
    userMetadata === undefined ||
    bio === undefined ||
    role === undefined ||
    settings === undefined
  ) {
    throw new PlatformResponseInvalidError(
      `correctSubject: the profile read has no ${missing.join(', ')}; update-user wipes a field it is not sent, so nothing was changed`,
    );
  }
  const newEmail = corrections.email ?? email;
  return {
    user_name: corrections.user_name ?? userName,
    display_name: corrections.display_name ?? displayName,
    email: newEmail,
    email_verified: newEmail === email ? emailVerified : false,
    image_url: corrections.image_url ?? imageUrl,
    location: corrections.location ?? location,
    private_profile: privateProfile,
    user_metadata:
      typeof userMetadata === 'string'
        ? userMetadata
        : Buffer.from(JSON.stringify(userMetadata)).toString('base64'),
    bio: corrections.bio ?? bio,
    role,
    settings,
  };
}

/** How the re-read compares with what was sent. */
interface Comparison {
  /** Fields that differ from what was sent, and not as the platform alters a taken user_name. */
  readonly changedByOthers: readonly string[];
  /** Corrected fields the platform took in another form (a taken user_name with characters appended). */
  readonly altered: readonly CorrectableField[];
}

/** Characters of a requested user_name a platform that appends to a taken one may keep at least. */
const KEPT_USER_NAME_PREFIX = 20;

/**
 * A user_name the platform made unique: the requested one with characters appended (cut first when
 * the whole would be too long). Compared in lower case, as the platform compares names.
 */
function madeUnique(requested: string, taken: string): boolean {
  const wanted = [...requested.toLowerCase()];
  const got = [...taken.toLowerCase()];
  const kept = Math.min(wanted.length, KEPT_USER_NAME_PREFIX);
  return got.length > kept && got.slice(0, kept).join('') === wanted.slice(0, kept).join('');
}

function compare(sent: ProfileUpdate, after: RetrievedUser, corrections: Corrections): Comparison {
  const changedByOthers: string[] = [];
  const altered: CorrectableField[] = [];
  for (const field of PROFILE_FIELDS) {
    if (field === 'user_metadata') {
      const decoded = typeof sent.user_metadata === 'string' ? decodeMetadata(sent.user_metadata) : undefined;
      const got = after.user_metadata;
      const same =
        typeof got === 'string'
          ? got === sent.user_metadata
          : decoded !== undefined && isDeepStrictEqual(decoded, got);
      if (!same) changedByOthers.push(field);
      continue;
    }
    const got = after[field];
    if (isDeepStrictEqual(got, sent[field])) continue;
    if (
      field === 'user_name' &&
      corrections.user_name !== undefined &&
      typeof got === 'string' &&
      madeUnique(corrections.user_name, got)
    ) {
      altered.push('user_name');
      continue;
    }
    changedByOthers.push(field);
  }
  return { changedByOthers, altered };
}

function decodeMetadata(base64: string): unknown {
  try {
    return JSON.parse(Buffer.from(base64, 'base64').toString('utf8'));
  } catch {
    return undefined;
  }
}

/**
 * Locks the keyed hashes of the values before the first write, once: the record's eventId makes a
 * later append (a second attempt, a step run again after a wait for capacity or a crash, which
 * reads a profile it may have corrected already) return the first record instead of writing.
 */
async function recordOldValues(
  requestId: string,
  read: RetrievedUser,
  fields: readonly CorrectableField[],
  deps: StepDeps,
): Promise<void> {
  await deps.audit.append(requestId, {
    eventId: 'CorrectSubject:before',
    step: 'CorrectSubject',
    action: 'profile_read_before_correction',
    facts: { fields: fields.join(',') },
    hashedFacts: Object.fromEntries(fields.map((field) => [`${field}_old`, fieldValue(read, field)])),
  });
}

/** The value of a correctable field as a profile holds it. */
function fieldValue(user: RetrievedUser, field: CorrectableField): string {
  const value = user[field];
  return typeof value === 'string' ? value : '';
}

/**
 * Records the correction: in the ledger its outcome and the altered field names, with the values
 * removed; in the audit trail, per field, the keyed hashes of the requested and new values and
 * whether the re-read matched the request (the old values' hashes are in the record before it).
 */
async function record(
  requestId: string,
  item: { readonly primary_key: string; readonly svc_user_id?: string },
  result: {
    readonly sent: ProfileUpdate;
    readonly after: RetrievedUser;
    readonly corrections: Corrections;
    readonly comparison: Comparison;
    readonly attempt: number;
  },
  deps: StepDeps,
): Promise<CorrectOutput> {
  const { sent, after, corrections, comparison, attempt } = result;
  const fields = correctionFields(corrections);
  const outcome = comparison.altered.length > 0 ? 'corrected_with_changes' : 'corrected';
  const facts: Record<string, string | number | boolean> = {
    outcome,
    fields: fields.join(','),
    attempts: attempt,
  };
  const hashedFacts: Record<string, string> = {};
  for (const field of fields) {
    const requested = corrections[field] ?? '';
    hashedFacts[`${field}_requested`] = requested;
    hashedFacts[`${field}_new`] = fieldValue(after, field);
    facts[`${field}_matched`] = fieldValue(after, field) === requested;
    if (comparison.altered.includes(field)) facts[`${field}_altered_by_platform`] = true;
  }
  if (corrections.email !== undefined) facts.email_verified_after = after.email_verified === true;
  // A new address goes to the platform unverified (fullUpdate): the record says so, for the team to
  // have the subject confirm it. The address itself stays out (its keyed hash is in hashedFacts).
  const emailSentUnverified = corrections.email !== undefined && sent.email_verified === false;
  if (emailSentUnverified) facts.email_sent_unverified = true;
  const at = deps.clock().toISOString();
  await recordingSideEffect(
    deps,
    requestId,
    () =>
      deps.ledger.update(
        requestId,
        {
          correction: {
            outcome,
            altered: [...comparison.altered],
            attempts: attempt,
            ...(emailSentUnverified ? { email_sent_unverified: true as const } : {}),
            at,
          },
          correction_values: null,
        },
        ['running'],
      ),
    {
      eventId: 'CorrectSubject',
      step: 'CorrectSubject',
      action: 'subject_corrected',
      facts,
      hashedFacts,
      subject: { primaryKey: item.primary_key, ...(item.svc_user_id ? { svcUserId: item.svc_user_id } : {}) },
    },
  );
  deps.logger.info('subject corrected', { outcome, fields, altered: comparison.altered, attempts: attempt });
  return { outcome };
}

/** The CorrectSubject step: contract and domain function. */
export const correctSubjectStep = {
  name: 'CorrectSubject',
  input: stepInputSchema,
  output: correctOutputSchema,
  run: correctSubject,
} as const;
