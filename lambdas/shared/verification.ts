import { z } from 'zod';
import type { RequestType } from './request.ts';

/**
 * How a request's verification method is judged at intake (the verification gate): the stack
 * config lists the methods accepted per request type. `*` stands for every method that verifies
 * something; the spellings of "not verified" are never covered by it.
 */
export const ANY_VERIFIED_METHOD = '*';

/** Spellings of "the identity was not verified", compared trimmed and in lower case. */
export const UNVERIFIED_METHODS = ['none', '', 'unverified'] as const;

/** The denial code of a request whose verification method is not accepted. */
export const IDENTITY_NOT_VERIFIED = 'identity_not_verified';

const methodName = z
  .string()
  .trim()
  .toLowerCase()
  .regex(/^(\*|[a-z0-9][a-z0-9_.:-]{0,63})$/, 'expected "*" or a method name such as "email_link"');

/** The accepted methods per request type. */
export const verificationPolicySchema = z.strictObject({
  access: z.array(methodName).min(1, 'list at least one method, or "*"'),
  erasure: z.array(methodName).min(1, 'list at least one method, or "*"'),
});
export type VerificationPolicy = z.infer<typeof verificationPolicySchema>;

/** The default: every method is accepted for both types, except the spellings of "none". */
export const DEFAULT_VERIFICATION_POLICY: VerificationPolicy = {
  access: [ANY_VERIFIED_METHOD],
  erasure: [ANY_VERIFIED_METHOD],
};

/** True when the policy accepts `method` for a request of `type`. */
export function verificationAccepted(policy: VerificationPolicy, type: RequestType, method: string): boolean {
  const normalised = method.trim().toLowerCase();
  const accepted = policy[type];
  if (accepted.includes(normalised)) return true;
  return (
    accepted.includes(ANY_VERIFIED_METHOD) && !(UNVERIFIED_METHODS as readonly string[]).includes(normalised)
  );
}

/** The policy from the intake Lambda's environment (JSON), or the default when unset. */
export const verificationPolicyEnvSchema = z
  .string()
  .optional()
  .transform((value, context) => {
    if (value === undefined || value.trim() === '') return DEFAULT_VERIFICATION_POLICY;
    try {
      return verificationPolicySchema.parse(JSON.parse(value));
    } catch (error) {
      context.addIssue({
        code: 'custom',
        message: `must be JSON {"access": [...], "erasure": [...]} of method names or "*" (${error instanceof Error ? error.message.slice(0, 200) : String(error)})`,
      });
      return z.NEVER;
    }
  });
