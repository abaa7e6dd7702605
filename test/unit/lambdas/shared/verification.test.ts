import { describe, expect, it } from 'vitest';
import {
  canonicalMethod,
  DEFAULT_VERIFICATION_POLICY,
  judgeVerification,
  saysNotVerified,
  type VerificationPolicy,
  verificationPolicyEnvSchema,
  verificationPolicySchema,
} from '#shared/verification';

const RECEIVED_AT = '2026-11-20T09:00:00Z';

function requestWith(
  method: string,
  options: { type?: 'access' | 'erasure' | 'correction'; verifiedAt?: string } = {},
): Parameters<typeof judgeVerification>[1] {
  return {
    type: options.type ?? 'erasure',
    received_at: RECEIVED_AT,
    verification: { method, verified_at: options.verifiedAt ?? '2026-11-20T09:05:00Z' },
  };
}

function judge(
  method: string,
  options?: Parameters<typeof requestWith>[1],
  policy = DEFAULT_VERIFICATION_POLICY,
) {
  return judgeVerification(policy, requestWith(method, options));
}

describe('DEFAULT_VERIFICATION_POLICY', () => {
  it('names four methods, each accepted for access and erasure, three for correction, verified at most 30 days before receipt', () => {
    expect(DEFAULT_VERIFICATION_POLICY).toEqual({
      methods: {
        email_link: { acceptedFor: ['access', 'erasure'] },
        account_login: { acceptedFor: ['access', 'erasure', 'correction'] },
        id_document: { acceptedFor: ['access', 'erasure', 'correction'] },
        authorized_agent: { acceptedFor: ['access', 'erasure', 'correction'] },
      },
      maxAgeDays: 30,
    });
  });
});

describe('canonicalMethod', () => {
  it('compares after NFKC, trimmed, in lower case, with "-" and "_" the same', () => {
    for (const spelling of [
      'email_link',
      ' Email-Link ',
      'EMAIL_LINK',
      '\uff45\uff4d\uff41\uff49\uff4c_link',
    ]) {
      expect(canonicalMethod(spelling)).toBe('email_link');
    }
  });
});

describe('judgeVerification', () => {
  it.each(['email_link', 'Email-Link', ' ACCOUNT_LOGIN ', 'id-document', 'authorized_agent'])(
    'accepts "%s" by default',
    (method) => {
      expect(judge(method)).toEqual({ kind: 'accepted' });
    },
  );

  it.each(['pending', 'not_verified', 'id_check_failed', '*', 'email', 'id document'])(
    'calls "%s" a method the stack does not know, naming the methods it knows',
    (method) => {
      expect(judge(method)).toEqual({
        kind: 'unknown',
        error: expect.stringMatching(
          /^verification\.method: not a method this stack knows: this stack knows account_login, authorized_agent, email_link, id_document /,
        ),
      });
    },
  );

  it.each([
    ['Cyrillic е', '\u0435mail_link', 'U+0435'],
    ['Greek ο', 'acc\u03bfunt_login', 'U+03BF'],
    ['a zero-width joiner', 'email\u200dlink', 'U+200D'],
    ['a zero-width non-joiner', 'email_link\u200c', 'U+200C'],
    ['a soft hyphen', 'id\u00addocument', 'U+00AD'],
    ['a Unicode hyphen', 'email\u2010link', 'U+2010'],
    ['a combining accent', 'emai\u0301l_link', 'U+00ED'],
  ])('never matches a method written with %s, and says which character', (_what, method, codePoint) => {
    expect(judge(method)).toEqual({
      kind: 'unknown',
      error: expect.stringContaining(
        `verification.method: holds ${codePoint}, which is invisible or only looks like`,
      ),
    });
  });

  it.each([
    'none',
    'None',
    ' NONE ',
    'unverified',
    'Un-Verified',
    '  ',
    'n\u043ene',
    'n\u03bfne',
    '\u0578one',
    'none\u200d',
    '\u200cnone',
    'no\u00adne',
    'n\u00f6ne',
    'unv\u0435rified',
    '\u3164',
    '\u200d',
    'N0NE',
  ])('denies "%s", a spelling or look-alike of not verified, whatever the list holds', (method) => {
    const permissive: VerificationPolicy = verificationPolicySchema.parse({
      methods: { email_link: { acceptedFor: ['access', 'erasure'] } },
    });

    expect(judge(method, {}, permissive)).toMatchObject({ kind: 'denied', problem: 'not_verified' });
    expect(saysNotVerified(method)).toBe(true);
  });

  it('denies a known method for a type it is not accepted for, and a method accepted for none', () => {
    const policy = verificationPolicySchema.parse({
      methods: {
        email_link: { acceptedFor: ['access'] },
        id_document: { acceptedFor: ['access', 'erasure', 'correction'] },
        pending: { acceptedFor: [] },
      },
    });

    expect(judge('email_link', { type: 'access' }, policy)).toEqual({ kind: 'accepted' });
    expect(judge('Email-Link', { type: 'erasure' }, policy)).toEqual({
      kind: 'denied',
      problem: 'not_accepted_for_type',
      reason:
        'verification method "email_link" is not accepted for erasure requests; this stack accepts id_document for erasure requests: verify the identity with one of them and submit again (stack config "verification", docs/deploy.md)',
    });
    expect(judge('id_document', { type: 'erasure' }, policy)).toEqual({ kind: 'accepted' });
    expect(judge('pending', { type: 'access' }, policy)).toMatchObject({
      kind: 'denied',
      problem: 'not_accepted_for_type',
    });
  });

  it('says why an e-mail link does not verify a correction, and which methods do', () => {
    const judged = judge('email_link', { type: 'correction' }, DEFAULT_VERIFICATION_POLICY);

    expect(judged).toEqual({
      kind: 'denied',
      problem: 'not_accepted_for_type',
      reason:
        'verification method "email_link" is not accepted for correction requests: a link sent to the address on file proves control of that address, which a correction may replace; this stack accepts account_login, authorized_agent, id_document for correction requests: verify the identity with one of them and submit again (stack config "verification", docs/deploy.md)',
    });
  });

  it('says when a stack accepts no method for the type', () => {
    const policy = verificationPolicySchema.parse({ methods: { email_link: { acceptedFor: ['access'] } } });

    expect(judge('email_link', { type: 'erasure' }, policy)).toMatchObject({
      reason: expect.stringContaining('; this stack accepts no method for erasure requests (stack config'),
    });
  });

  it('denies a verification more than the maximum age before receipt, and accepts one at the limit', () => {
    expect(judge('email_link', { verifiedAt: '2025-11-20T09:00:00Z' })).toEqual({
      kind: 'denied',
      problem: 'verified_too_early',
      reason:
        'verified_at is more than 30 days before received_at, longer than the stack accepts: verify the identity again',
    });
    expect(judge('email_link', { verifiedAt: '2026-10-21T08:59:59Z' })).toMatchObject({
      problem: 'verified_too_early',
    });
    expect(judge('email_link', { verifiedAt: '2026-10-21T09:00:00Z' })).toEqual({ kind: 'accepted' });
    // An offset is an instant like any other: 10:00+01:00 is 09:00Z, exactly 30 days.
    expect(judge('email_link', { verifiedAt: '2026-10-21T10:00:00+01:00' })).toEqual({ kind: 'accepted' });
    const week = verificationPolicySchema.parse({ ...DEFAULT_VERIFICATION_POLICY, maxAgeDays: 7 });
    expect(judge('email_link', { verifiedAt: '2026-11-12T09:00:00Z' }, week)).toMatchObject({
      problem: 'verified_too_early',
    });
  });

  it('accepts a verification made after receipt', () => {
    expect(judge('email_link', { verifiedAt: '2026-12-01T00:00:00Z' })).toEqual({ kind: 'accepted' });
  });
});

describe('verificationPolicySchema', () => {
  function issuesOf(raw: unknown): string[] {
    const parsed = verificationPolicySchema.safeParse(raw);
    if (parsed.success) throw new Error('expected the policy to be refused');
    return parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
  }

  it('keeps the names in canonical form and defaults the maximum age to 30 days', () => {
    expect(
      verificationPolicySchema.parse({ methods: { 'Email-Link': { acceptedFor: ['access'] } } }),
    ).toEqual({
      methods: { email_link: { acceptedFor: ['access'] } },
      maxAgeDays: 30,
    });
  });

  it('refuses "*", the spellings of not verified, look-alikes and names that are not method names', () => {
    const ok = { acceptedFor: ['access'] };
    expect(
      issuesOf({
        methods: { '*': ok, None: ok, 'n\u043ene': ok, '\u0435mail_link': ok, 'id card': ok, email_link: ok },
      }),
    ).toEqual([
      'methods.*: "*" is not a method: name each method the stack accepts, e.g. "email_link"',
      'methods.None: "None" says the identity was not verified: such requests are always denied, so it cannot be an accepted method',
      `methods.n\u043ene: "n\u043ene" says the identity was not verified: such requests are always denied, so it cannot be an accepted method`,
      `methods.\u0435mail_link: "\u0435mail_link" holds U+0435: a method name is 1-64 ASCII letters, digits, "_", "-", "." or ":"`,
      'methods.id card: "id card" is not a method name: 1-64 ASCII letters, digits, "_", "-", "." or ":", starting with a letter or digit',
    ]);
  });

  it('refuses two spellings of one method, an unknown request type, a type listed twice, and every problem at once', () => {
    expect(
      issuesOf({
        methods: {
          email_link: { acceptedFor: ['access'] },
          'Email-Link': { acceptedFor: ['erasure'] },
          id_document: { acceptedFor: ['access', 'access'] },
          account_login: { acceptedFor: ['deletion'] },
          agent: { acceptedFor: ['access'], maxAge: 3 },
        },
        maxAgeDays: 400,
      }),
    ).toEqual([
      'methods.Email-Link: "Email-Link" and "email_link" are the same method (case, "-" and "_" do not count): keep one',
      'methods.id_document.acceptedFor: lists a request type twice',
      'methods.account_login.acceptedFor.0: must be access, erasure or correction',
      'methods.agent: Unrecognized key: "maxAge"',
      'maxAgeDays: Too big: expected number to be <=365',
    ]);
  });

  it('refuses a list that accepts nothing for any type, and an empty list', () => {
    expect(issuesOf({ methods: { pending: { acceptedFor: [] } } })).toEqual([
      expect.stringContaining('accepts no method for any request type'),
    ]);
    expect(issuesOf({ methods: {} })).toEqual([
      expect.stringContaining('accepts no method for any request type'),
    ]);
  });
});

describe('verificationPolicyEnvSchema', () => {
  it('reads the JSON the stack writes', () => {
    expect(verificationPolicyEnvSchema.parse(JSON.stringify(DEFAULT_VERIFICATION_POLICY))).toEqual(
      DEFAULT_VERIFICATION_POLICY,
    );
  });

  it('refuses an unset variable, JSON that is not a policy, and the old per-type shape', () => {
    expect(verificationPolicyEnvSchema.safeParse(undefined).success).toBe(false);
    expect(verificationPolicyEnvSchema.safeParse('email_link').success).toBe(false);
    expect(verificationPolicyEnvSchema.safeParse('{"access":["*"],"erasure":["*"]}').success).toBe(false);
  });
});
