// The ResolveSubject step: finds the subject's platform user id from primary_key and keeps it in the ledger.
import { SubjectUnderOtherSpellingError } from '#shared/errors';
import { singleScriptForms, skeleton } from '#shared/lookalike';
import type { StepDeps } from '#shared/step-deps';
import { activeRequest } from '#shared/step-guards';
import { type ResolveOutput, resolveOutputSchema, type StepInput, stepInputSchema } from '#shared/step-io';

/**
 * Finds the subject on the platform (primary_key -> svc_user_id) and keeps the id in the ledger.
 * A subject resolved before (a resumed or re-run execution, perhaps after the deletion) is not
 * looked up again: after an erasure the platform would say not-found. The look-up only reads, so
 * the request moves to `running` with its answer, in one conditional write that a cancellation
 * made meanwhile still stops.
 */
export async function resolveSubject(input: StepInput, deps: StepDeps): Promise<ResolveOutput> {
  const item = await activeRequest(deps, input.request_id, input.execution);
  if (item.status === 'completed') return { found: item.outcome !== 'no_data', already_completed: true };
  if (item.svc_user_id !== undefined) {
    // A new execution: its waits for platform capacity are counted afresh.
    if (item.platform_waits !== undefined || item.export_slot_waits !== undefined) {
      await deps.ledger.update(input.request_id, { platform_waits: null, export_slot_waits: null }, [
        'received',
        'running',
      ]);
    }
    return { found: true, already_completed: false };
  }

  const result = await deps.platform.retrieveUser(item.primary_key);
  if (!result.found) {
    const spelling = await otherSpellingFound(item.primary_key, deps);
    if (spelling !== undefined) {
      throw new SubjectUnderOtherSpellingError(
        `the platform has no user under the key as submitted, but has one under its ${spelling.name} (${spelling.meaning}); nothing was exported or erased and the request is not answered as no_data: confirm the key with the site, then submit the request again with the platform's spelling`,
      );
    }
  }
  await deps.ledger.update(
    input.request_id,
    {
      status: 'running',
      step: 'resolving',
      error: null,
      platform_waits: null,
      export_slot_waits: null,
      ...(result.found ? { svc_user_id: result.svcUserId } : {}),
    },
    ['received', 'running'],
  );
  await deps.audit.append(input.request_id, {
    eventId: 'ResolveSubject',
    step: 'ResolveSubject',
    action: result.found ? 'subject_resolved' : 'subject_not_found',
    facts: { found: result.found },
    subject: result.found
      ? { primaryKey: item.primary_key, svcUserId: result.svcUserId }
      : { primaryKey: item.primary_key },
  });
  deps.logger.info('subject resolved', { found: result.found });
  return { found: result.found, already_completed: false };
}

/** The Unicode normalisation forms a key is looked up in before its request ends no_data. */
const NORMALISATION_FORMS = ['NFC', 'NFD', 'NFKC', 'NFKD'] as const;

/** The most single-script forms of a mixed-script key looked up: one per script, the most used first. */
export const MAX_SINGLE_SCRIPT_FORMS = 3;

/**
 * The most extra look-ups for a key outside ASCII the platform does not know: its four
 * normalisation forms, its single-script forms and its confusable skeleton (in NFD and NFC).
 * Spellings that come out the same as one already tried are not looked up again.
 */
export const MAX_OTHER_SPELLING_LOOKUPS = NORMALISATION_FORMS.length + MAX_SINGLE_SCRIPT_FORMS + 2;

/** A spelling of the key the platform knows, as the error names it: never the spelling itself. */
interface OtherSpelling {
  readonly name: string;
  readonly meaning: string;
}

/**
 * The other spelling under which the platform knows a user the key as written did not find, or
 * undefined. The platform matches keys byte for byte, so two keys that look the same are two
 * keys: "é" as one code point (NFC) and as "e" with a combining accent (NFD); `u-pаul28` with a
 * Cyrillic "а" and `u-paul28` in Latin. A no_data answer for one while the subject is stored under
 * the other would report an erasure done while the data stays. Looked up in turn, stopping at the
 * first the platform knows: the normalisation forms, the single-script forms of a key that mixes
 * scripts (the Latin-only `u-paul28`), then the confusable skeleton (UTS #39), at most
 * MAX_OTHER_SPELLING_LOOKUPS in all. An ASCII key has no other spelling and costs no extra look-up.
 */
async function otherSpellingFound(primaryKey: string, deps: StepDeps): Promise<OtherSpelling | undefined> {
  if (/^[\x20-\x7e]*$/.test(primaryKey)) return undefined;
  const tried = new Set([primaryKey]);
  const candidates = (function* (): Generator<{ readonly key: string } & OtherSpelling> {
    for (const form of NORMALISATION_FORMS) {
      yield {
        key: primaryKey.normalize(form),
        name: `${form} form`,
        meaning: 'the same text in another Unicode normalisation',
      };
    }
    for (const form of singleScriptForms(primaryKey, MAX_SINGLE_SCRIPT_FORMS)) {
      yield {
        key: form.text,
        name: `${form.script}-only form`,
        meaning: `the same-looking text with its look-alike letters of other scripts written in ${form.script} (Unicode UTS #39)`,
      };
    }
    const confusable = skeleton(primaryKey);
    for (const key of [confusable, confusable.normalize('NFC')]) {
      yield {
        key,
        name: 'confusable skeleton',
        meaning:
          'the same-looking text with each look-alike character written as its prototype (Unicode UTS #39)',
      };
    }
  })();
  for (const { key, ...spelling } of candidates) {
    if (tried.has(key)) continue;
    tried.add(key);
    if ((await deps.platform.retrieveUser(key)).found) return spelling;
  }
  return undefined;
}

/** The ResolveSubject step: contract and domain function. */
export const resolveSubjectStep = {
  name: 'ResolveSubject',
  input: stepInputSchema,
  output: resolveOutputSchema,
  run: resolveSubject,
} as const;
