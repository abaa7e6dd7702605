// The verification gate: the methods accepted for each request type, and how old one may be.
import { z } from 'zod';
import { dsrRequestSchema, type RequestType, rfc3339Instant } from './request.ts';

/**
 * The verification gate: the stack config names the verification methods it knows (a closed list),
 * each with the request types it is accepted for, and how long before receipt a verification may
 * have happened. Intake judges every valid request against it (`judgeVerification`).
 */

/** The denial code of a request whose identity was not verified well enough to answer it. */
export const IDENTITY_NOT_VERIFIED = 'identity_not_verified';

/** The request types a method can be accepted for: every type the request schema knows. */
export const VERIFIABLE_REQUEST_TYPES = dsrRequestSchema.shape.type.options;

/**
 * Spellings of "the identity was not verified" (canonical form). A request that says so is denied,
 * whatever the list holds; no configured method may be one of them.
 */
export const UNVERIFIED_METHODS = ['none', 'unverified', ''] as const;

/** Days `verified_at` may lie before `received_at` unless the config says otherwise. */
export const DEFAULT_VERIFICATION_MAX_AGE_DAYS = 30;

/** The longest the config may allow between a verification and the request's receipt. */
export const MAX_VERIFICATION_MAX_AGE_DAYS = 365;

/**
 * The spelling methods are compared in: NFKC, trimmed, lower case, "-" written "_". NFKC makes
 * compatibility forms (full-width letters, ligatures) the letters they stand for; it leaves
 * look-alikes from other scripts (Cyrillic "е") and invisible characters in place, so a method that
 * holds one never equals a configured name, which is plain ASCII.
 */
export function canonicalMethod(method: string): string {
  return method.normalize('NFKC').trim().toLowerCase().normalize('NFKC').replaceAll('-', '_');
}

/** A configured method's name in canonical form: ASCII letters and digits, "_", "." and ":". */
const CANONICAL_NAME = /^[a-z0-9][a-z0-9_.:]{0,63}$/;

/**
 * The first character of `canonical` outside ASCII, as "U+0435": an invisible character or a
 * look-alike of a Latin letter, which a person reading the method cannot see. Undefined when none.
 */
function firstNonAscii(canonical: string): string | undefined {
  for (const char of canonical) {
    const code = char.codePointAt(0) ?? 0;
    if (code > 0x7e) return `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
  }
  return undefined;
}

/**
 * Characters that show nothing, or nothing of their own: format characters (zero-width space,
 * joiners, soft hyphen, bidirectional marks, tags), combining marks and variation selectors, white
 * space and separators, the Hangul fillers and the blank Braille pattern.
 */
const INVISIBLE = /[\p{Cf}\p{Mn}\p{Me}\p{Cc}\p{Z}\s\u115f\u1160\u3164\uffa0\u2800]/gu;

/** Separators a "not verified" spelling may be written with or without ("un-verified"). */
const SEPARATORS = /[_.:]/g;

/**
 * Letters of other scripts (Cyrillic, Greek, Armenian), Latin small capitals and digits that look like
 * a lower-case Latin letter, after lower-casing. Used only to recognise a look-alike of a "not
 * verified" spelling; a look-alike never matches a configured method either way.
 */
const LOOK_ALIKES: Readonly<Record<string, string>> = {
  a: 'аɑα',
  c: 'сϲ',
  d: 'ԁɗ',
  e: 'еҽε℮ᴇ',
  f: 'ꜰ',
  h: 'һ',
  i: 'іıɩιӏɪ1',
  j: 'ј',
  k: 'κкᴋ',
  l: 'ɫ',
  n: 'ոպпηɴ',
  o: 'оοօᴏσ0',
  p: 'рρ',
  r: 'гʀᴦ',
  s: 'ѕ',
  u: 'υսᴜ',
  v: 'νѵᴠ',
  x: 'хχ',
  y: 'уүγʏ',
};
const LATIN_OF = new Map(
  Object.entries(LOOK_ALIKES).flatMap(([latin, others]) => [...others].map((other) => [other, latin])),
);

/** What `method` would read as to a person: no invisible characters or separators, look-alikes as Latin. */
function skeleton(method: string): string {
  const bare = canonicalMethod(method).normalize('NFD').replace(INVISIBLE, '').replace(SEPARATORS, '');
  return [...bare].map((char) => LATIN_OF.get(char) ?? char).join('');
}

/** The "not verified" spellings without their separators, as `skeleton` writes them. */
const UNVERIFIED_SKELETONS: readonly string[] = UNVERIFIED_METHODS.map((method) =>
  method.replace(SEPARATORS, ''),
);

/**
 * True when `method` says the identity was not verified: "none", "unverified" or the empty string,
 * in any case, with white space or invisible characters, or written with look-alike letters.
 */
export function saysNotVerified(method: string): boolean {
  return UNVERIFIED_SKELETONS.includes(skeleton(method));
}

/** Why a configured method name cannot be used, or undefined when it can. */
function methodNameProblem(name: string): string | undefined {
  if (name.trim() === '*') {
    return '"*" is not a method: name each method the stack accepts, e.g. "email_link"';
  }
  if (saysNotVerified(name)) {
    return `"${name}" says the identity was not verified: such requests are always denied, so it cannot be an accepted method`;
  }
  const canonical = canonicalMethod(name);
  if (!CANONICAL_NAME.test(canonical)) {
    const foreign = firstNonAscii(canonical);
    return foreign === undefined
      ? `"${name}" is not a method name: 1-64 ASCII letters, digits, "_", "-", "." or ":", starting with a letter or digit`
      : `"${name}" holds ${foreign}: a method name is 1-64 ASCII letters, digits, "_", "-", "." or ":"`;
  }
  return undefined;
}

const methodSchema = z.strictObject({
  /** The request types this method is accepted for; a method accepted for none is known, and denied. */
  acceptedFor: z
    .array(
      z.enum(VERIFIABLE_REQUEST_TYPES, {
        message: `must be ${VERIFIABLE_REQUEST_TYPES.slice(0, -1).join(', ')} or ${VERIFIABLE_REQUEST_TYPES.at(-1)}`,
      }),
    )
    .refine((types) => new Set(types).size === types.length, 'lists a request type twice'),
});
type MethodSettings = z.infer<typeof methodSchema>;

/**
 * The configured methods by name. Every problem is reported at once (names and settings alike),
 * and the names come out in canonical form.
 */
const methodsSchema = z.record(z.string(), z.unknown()).transform((raw, context) => {
  const methods: Record<string, MethodSettings> = {};
  const seen = new Map<string, string>();
  for (const [name, value] of Object.entries(raw)) {
    const problem = methodNameProblem(name);
    if (problem !== undefined) context.addIssue({ code: 'custom', path: [name], message: problem });
    const settings = methodSchema.safeParse(value);
    if (!settings.success) {
      for (const issue of settings.error.issues) {
        context.addIssue({ code: 'custom', path: [name, ...issue.path], message: issue.message });
      }
    }
    if (problem !== undefined || !settings.success) continue;
    const canonical = canonicalMethod(name);
    const earlier = seen.get(canonical);
    if (earlier !== undefined) {
      context.addIssue({
        code: 'custom',
        path: [name],
        message: `"${name}" and "${earlier}" are the same method (case, "-" and "_" do not count): keep one`,
      });
    }
    seen.set(canonical, name);
    methods[canonical] = settings.data;
  }
  if (
    !Object.values(methods).some((method) => method.acceptedFor.length > 0) &&
    seen.size === Object.keys(raw).length
  ) {
    context.addIssue({
      code: 'custom',
      message:
        'accepts no method for any request type, so every request would be denied: name at least one method with the types it is accepted for',
    });
  }
  return methods;
});

/**
 * The gate's configuration, as the stack config holds it: the methods by name and the maximum age of
 * a verification at receipt. Names are kept in canonical form.
 */
export const verificationPolicySchema = z.strictObject({
  methods: methodsSchema,
  maxAgeDays: z
    .number()
    .int()
    .min(1)
    .max(MAX_VERIFICATION_MAX_AGE_DAYS)
    .default(DEFAULT_VERIFICATION_MAX_AGE_DAYS),
});
export type VerificationPolicy = z.output<typeof verificationPolicySchema>;
export type VerificationPolicyInput = z.input<typeof verificationPolicySchema>;

/**
 * The default: four methods, verified at most 30 days before receipt, each accepted for access and
 * erasure. A correction can change the e-mail address itself, so a link sent to the address on file
 * is not accepted for it by default: the other three are.
 */
export const DEFAULT_VERIFICATION_POLICY: VerificationPolicy = verificationPolicySchema.parse({
  methods: {
    email_link: { acceptedFor: ['access', 'erasure'] },
    account_login: { acceptedFor: ['access', 'erasure', 'correction'] },
    id_document: { acceptedFor: ['access', 'erasure', 'correction'] },
    authorized_agent: { acceptedFor: ['access', 'erasure', 'correction'] },
  },
  maxAgeDays: DEFAULT_VERIFICATION_MAX_AGE_DAYS,
});

/** The names of the methods the policy knows, sorted, for messages. */
export function knownMethods(policy: VerificationPolicy): string[] {
  return Object.keys(policy.methods).sort();
}

/** Why a method is not a known one, as a field error of `verification.method`; undefined when it is known. */
export function unknownMethodError(policy: VerificationPolicy, method: string): string | undefined {
  const canonical = canonicalMethod(method);
  if (Object.hasOwn(policy.methods, canonical) || saysNotVerified(method)) return undefined;
  const known = `this stack knows ${knownMethods(policy).join(', ')} (stack config "verification", docs/deploy.md)`;
  const foreign = firstNonAscii(canonical);
  if (foreign !== undefined) return `${unlistableMessage(foreign)}: ${known}`;
  return `verification.method: not a method this stack knows: ${known}`;
}

function unlistableMessage(foreign: string): string {
  return `verification.method: holds ${foreign}, which is invisible or only looks like a Latin letter or "-", so it matches no method; write the method in plain ASCII`;
}

/**
 * The field error of a method that no stack's list can name, whatever it holds: one with an
 * invisible or look-alike character (names are plain ASCII), unless it spells "not verified",
 * which intake denies. Undefined for any other method. The CLI checks this before sending.
 */
export function unlistableMethodError(method: string): string | undefined {
  if (saysNotVerified(method)) return undefined;
  const foreign = firstNonAscii(canonicalMethod(method));
  return foreign === undefined ? undefined : unlistableMessage(foreign);
}

/** Why a valid request with a known (or "not verified") method is denied. */
export type VerificationProblem = 'not_verified' | 'not_accepted_for_type' | 'verified_too_early';

/** How the gate judges a valid request. */
export type VerificationJudgement =
  | { readonly kind: 'accepted' }
  /** The method is not on the list: a field error, the request is rejected. */
  | { readonly kind: 'unknown'; readonly error: string }
  /** The request is denied as identity_not_verified, for `problem`, explained by `reason`. */
  | { readonly kind: 'denied'; readonly problem: VerificationProblem; readonly reason: string };

const DAY_MS = 86_400_000;

/**
 * Judges a request's verification against the policy: an unknown method is a field error; a
 * "not verified" spelling, a method not accepted for the request's type, or a verification more than
 * `maxAgeDays` before receipt is a denial.
 */
export function judgeVerification(
  policy: VerificationPolicy,
  request: {
    readonly type: RequestType;
    readonly received_at: string;
    readonly verification: { readonly method: string; readonly verified_at: string };
  },
): VerificationJudgement {
  const { method, verified_at: verifiedAt } = request.verification;
  if (saysNotVerified(method)) {
    return {
      kind: 'denied',
      problem: 'not_verified',
      reason: 'the verification method says the identity was not verified',
    };
  }
  const error = unknownMethodError(policy, method);
  if (error !== undefined) return { kind: 'unknown', error };
  const canonical = canonicalMethod(method);
  const known = policy.methods[canonical];
  if (known === undefined || !known.acceptedFor.includes(request.type)) {
    return {
      kind: 'denied',
      problem: 'not_accepted_for_type',
      reason: notAcceptedReason(policy, canonical, request.type),
    };
  }
  const received = rfc3339Instant(request.received_at);
  const verified = rfc3339Instant(verifiedAt);
  if (received === undefined || verified === undefined) {
    // The request schema has checked both; a request that got here without them is not verified.
    return {
      kind: 'denied',
      problem: 'not_verified',
      reason: 'verified_at or received_at is not a date-time',
    };
  }
  const ageMs = received.getTime() - verified.getTime();
  if (ageMs > policy.maxAgeDays * DAY_MS) {
    return {
      kind: 'denied',
      problem: 'verified_too_early',
      reason: `verified_at is more than ${policy.maxAgeDays} days before received_at, longer than the stack accepts: verify the identity again`,
    };
  }
  return { kind: 'accepted' };
}

/**
 * Why a known method is refused for the type, and what the stack accepts instead: the reason a
 * person reads in `svc-dsr status`, without having to find the stack's configuration.
 */
function notAcceptedReason(policy: VerificationPolicy, method: string, type: RequestType): string {
  const accepted = knownMethods(policy).filter((name) => policy.methods[name]?.acceptedFor.includes(type));
  // An e-mail link proves control of the address on file, the very one a correction may replace.
  const why =
    type === 'correction' && method === 'email_link'
      ? ': a link sent to the address on file proves control of that address, which a correction may replace'
      : '';
  const instead =
    accepted.length === 0
      ? `this stack accepts no method for ${type} requests`
      : `this stack accepts ${accepted.join(', ')} for ${type} requests: verify the identity with one of them and submit again`;
  return `verification method "${method}" is not accepted for ${type} requests${why}; ${instead} (stack config "verification", docs/deploy.md)`;
}

/** The intake Lambda's environment variable that holds the policy as JSON. */
export const VERIFICATION_POLICY_ENV = 'VERIFICATION_POLICY';

/** The policy from the intake Lambda's environment (the JSON the stack writes). Required: the stack always sets it. */
export const verificationPolicyEnvSchema = z.string().transform((value, context) => {
  let json: unknown;
  try {
    json = JSON.parse(value);
  } catch {
    context.addIssue({
      code: 'custom',
      message: 'must be the JSON the stack writes, {"methods": {...}, "maxAgeDays": n}',
    });
    return z.NEVER;
  }
  const parsed = verificationPolicySchema.safeParse(json);
  if (parsed.success) return parsed.data;
  for (const issue of parsed.error.issues) {
    context.addIssue({
      code: 'custom',
      message: `${issue.path.map(String).join('.') || '(policy)'}: ${issue.message}`,
    });
  }
  return z.NEVER;
});
