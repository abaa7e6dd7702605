import { getSecret } from '@aws-lambda-powertools/parameters/secrets';
import { z } from 'zod';
import { ConfigurationError } from './errors.ts';

/** The platform secret's JSON value. */
export const platformSecretSchema = z.object({
  sso_access_token: z.string().min(1, 'is empty'),
  export_token: z.string().min(1, 'is empty'),
  /** Key for the audit trail's subject hashes; at least 32 characters. */
  audit_hmac_key: z.string().min(32, 'must be at least 32 characters'),
});
export type PlatformSecret = z.infer<typeof platformSecretSchema>;

/** Where a Lambda gets the platform secret; cached, so a warm Lambda does not call Secrets Manager per use. */
export type SecretSource = () => Promise<PlatformSecret>;

/** Reads the secret through Powertools Parameters (cached for `maxAgeSeconds`) and validates it. */
export function secretsManagerSource(secretId: string, maxAgeSeconds = 300): SecretSource {
  return async () => {
    const raw = await getSecret(secretId, { transform: 'json', maxAge: maxAgeSeconds });
    return parseSecret(raw, secretId);
  };
}

/** Validates a secret value; the error names the fields, never their values. */
export function parseSecret(raw: unknown, secretId: string): PlatformSecret {
  const parsed = platformSecretSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map(
    (issue) => `${issue.path.join('.') || '(value)'} ${issue.message}`,
  );
  throw new ConfigurationError(
    `the secret ${secretId} is not usable (${problems.join('; ')}); set it to JSON with sso_access_token, export_token and audit_hmac_key`,
  );
}
