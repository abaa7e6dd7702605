import { describe, expect, it } from 'vitest';
import {
  DEFAULT_VERIFICATION_POLICY,
  verificationAccepted,
  verificationPolicyEnvSchema,
} from '#shared/verification';

describe('verificationAccepted', () => {
  it.each(['email_link', 'id_document', 'Email_Link'])('accepts "%s" by default', (method) => {
    expect(verificationAccepted(DEFAULT_VERIFICATION_POLICY, 'erasure', method)).toBe(true);
  });

  it.each(['none', 'None', '', '  ', 'unverified', ' UNVERIFIED '])(
    'refuses "%s", a spelling of not verified, by default',
    (method) => {
      expect(verificationAccepted(DEFAULT_VERIFICATION_POLICY, 'access', method)).toBe(false);
    },
  );

  it('accepts only the listed methods for a type, and none only when listed by name', () => {
    const policy = { access: ['email_link', 'none'], erasure: ['id_document'] };
    expect(verificationAccepted(policy, 'access', 'email_link')).toBe(true);
    expect(verificationAccepted(policy, 'access', 'none')).toBe(true);
    expect(verificationAccepted(policy, 'erasure', 'email_link')).toBe(false);
    expect(verificationAccepted(policy, 'erasure', 'id_document')).toBe(true);
  });
});

describe('verificationPolicyEnvSchema', () => {
  it('reads the JSON the stack sets, and the default when unset', () => {
    expect(verificationPolicyEnvSchema.parse('{"access":["Email_Link"],"erasure":["*"]}')).toEqual({
      access: ['email_link'],
      erasure: ['*'],
    });
    expect(verificationPolicyEnvSchema.parse(undefined)).toEqual(DEFAULT_VERIFICATION_POLICY);
  });

  it('refuses a policy that is not JSON of method names', () => {
    expect(verificationPolicyEnvSchema.safeParse('{"access":[]}').success).toBe(false);
    expect(verificationPolicyEnvSchema.safeParse('email_link').success).toBe(false);
  });
});
