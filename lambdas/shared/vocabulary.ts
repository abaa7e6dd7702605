/**
 * The workflow's words as plain lists, with no schema around them: request types and channels,
 * statuses, denial codes, notice kinds, intake warnings, correctable fields. The schemas (request.ts, ledger/schema.ts) are built from
 * them and re-export them; the CLI names them in its help without loading the schemas.
 */

/** The request types: the rights of access, erasure and correction. */
export const REQUEST_TYPES = ['access', 'erasure', 'correction'] as const;

/** The fields a correction may name: the profile fields update-user can set for the subject. */
export const CORRECTABLE_FIELDS = [
  'user_name',
  'display_name',
  'email',
  'location',
  'bio',
  'image_url',
] as const;
export type CorrectableField = (typeof CORRECTABLE_FIELDS)[number];

/** How a request reached the business: CCPA regulations §7101(a) "manner in which the request was made". */
export const REQUEST_CHANNELS = [
  'web_form',
  'email',
  'phone',
  'postal_mail',
  'in_person',
  'authorized_agent',
  'other',
] as const;

/** The statuses a request moves through in the ledger. */
export const STATUSES = [
  'received',
  'running',
  'completed',
  'failed',
  'cancelled',
  'rejected',
  'denied',
] as const;

/** What a completed request came to. */
export const OUTCOMES = ['exported', 'erased', 'corrected', 'corrected_with_changes', 'no_data'] as const;

/**
 * Why a valid request is denied, as the CCPA §7102 denial categories word them (not verifiable,
 * not made by a consumer, exempt, other), plus GDPR Art. 12(5)'s manifestly unfounded or excessive.
 */
export const DENIAL_CODES = [
  'identity_not_verified',
  'not_a_consumer',
  'exempt',
  'manifestly_unfounded_or_excessive',
  'other',
] as const;

/**
 * What the subject is told, and recorded: the receipt confirmation (CCPA §7021, by `confirm_by`),
 * the extension with its reason (before the original deadline), the response, or the denial.
 */
export const NOTICE_KINDS = ['receipt', 'extension', 'response', 'denial'] as const;

/**
 * What intake warns of in a valid request it accepts (`svc-dsr status`, `svc-dsr submit`): the
 * request runs, but a person should look. `primary_key_mixed_scripts`: the key mixes scripts
 * (a Cyrillic "а" among Latin letters), so it may be a look-alike of the key the site meant.
 */
export const INTAKE_WARNINGS = ['primary_key_mixed_scripts'] as const;
