// The secrets svc-dsr reads, one Secrets Manager secret each, and how each function reads only its own.
import { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import { SecretsManagerClient, type SecretsManagerClientConfig } from '@aws-sdk/client-secrets-manager';
import { z } from 'zod';
import { ConfigurationError } from './errors.ts';
import type { PlatformToken } from './platform-schemas.ts';
import { prepareSdkClient } from './sdk-clients.ts';

/**
 * The secrets svc-dsr reads, one Secrets Manager secret each, so every function is granted only
 * what its calls need: the platform's SSO token (retrieve and delete a user), its export token
 * (exports), and the key of the audit trail's subject hashes (every function that writes audit).
 */
export const SECRETS = {
  ssoAccessToken: { env: 'SSO_TOKEN_SECRET_ID', what: 'the platform SSO access token', minLength: 1 },
  exportToken: { env: 'EXPORT_TOKEN_SECRET_ID', what: 'the platform export token', minLength: 1 },
  auditHmacKey: { env: 'AUDIT_KEY_SECRET_ID', what: 'the audit HMAC key', minLength: 32 },
} as const;
export type SecretName = keyof typeof SECRETS;

/**
 * Reads one secret's current value; cached, so a warm Lambda does not call Secrets Manager per use.
 * `refresh` reads it from Secrets Manager whatever the cache holds (a rotated secret).
 */
export type SecretReader = (options?: { readonly refresh?: boolean }) => Promise<string>;

/** The secrets one function may read: every function writes audit, only some call the platform. */
export type FunctionSecrets = { readonly auditHmacKey: SecretReader } & {
  readonly [K in PlatformToken]?: SecretReader;
};

/** The secret values local mode and tests hand the functions. */
export const secretValuesSchema = z.object({
  ssoAccessToken: z.string().min(1, 'is empty'),
  exportToken: z.string().min(1, 'is empty'),
  auditHmacKey: z.string().min(32, 'must be at least 32 characters'),
});
export type SecretValues = z.infer<typeof secretValuesSchema>;

/** Reads secrets through Powertools Parameters over one (recorded) Secrets Manager client. */
export function secretsManagerReaders(
  ids: { readonly [K in SecretName]?: string },
  options: { clientConfig?: SecretsManagerClientConfig; maxAgeSeconds?: number } = {},
): { [K in SecretName]?: SecretReader } {
  const provider = new SecretsProvider({
    awsSdkV3Client: prepareSdkClient(new SecretsManagerClient(options.clientConfig ?? {})),
  });
  const readers: { [K in SecretName]?: SecretReader } = {};
  for (const name of Object.keys(SECRETS) as SecretName[]) {
    const id = ids[name];
    if (id === undefined) continue;
    readers[name] = async (read) => {
      const value = await provider.get(id, {
        maxAge: options.maxAgeSeconds ?? 300,
        ...(read?.refresh === true ? { forceFetch: true } : {}),
      });
      return checkSecret(name, typeof value === 'string' ? value : undefined, id);
    };
  }
  return readers;
}

/** The readers of a function's environment; the audit key is required, the tokens where granted. */
export function functionSecretsFromEnv(
  env: Readonly<Record<string, string | undefined>>,
  options: { clientConfig?: SecretsManagerClientConfig } = {},
): FunctionSecrets {
  const readers = secretsManagerReaders(
    {
      ...(env[SECRETS.ssoAccessToken.env] ? { ssoAccessToken: env[SECRETS.ssoAccessToken.env] } : {}),
      ...(env[SECRETS.exportToken.env] ? { exportToken: env[SECRETS.exportToken.env] } : {}),
      ...(env[SECRETS.auditHmacKey.env] ? { auditHmacKey: env[SECRETS.auditHmacKey.env] } : {}),
    },
    options,
  );
  const { auditHmacKey } = readers;
  if (auditHmacKey === undefined) {
    throw new ConfigurationError(`${SECRETS.auditHmacKey.env} is not set; redeploy the stack to set it`);
  }
  return { ...readers, auditHmacKey };
}

/**
 * Whether `value` has the shape of the value CloudFormation generates for a secret created without
 * one (the stack's three secrets, until an operator sets them): Secrets Manager's default
 * password, 32 printable characters with at least one upper-case letter, one lower-case letter,
 * one digit and one punctuation character. It is long enough to pass as an audit key, but nobody
 * saved it, so nothing hashed under it could be checked later. The deploy guide's key
 * (`openssl rand -hex 32`) is 64 hex digits and never has this shape.
 *
 * The shape is recognised rather than the generated value marked: changing a deployed secret's
 * generation settings makes CloudFormation generate a new value over the key an operator set.
 */
export function isGeneratedPlaceholder(value: string): boolean {
  return (
    value.length === 32 &&
    /^[\x21-\x7E]+$/.test(value) &&
    /[A-Z]/.test(value) &&
    /[a-z]/.test(value) &&
    /[0-9]/.test(value) &&
    /[^A-Za-z0-9]/.test(value)
  );
}

/** Validates a secret value; the error names the secret, never its value. */
export function checkSecret(name: SecretName, value: string | undefined, secretId: string): string {
  const { what, minLength } = SECRETS[name];
  if (value === undefined || value.length < minLength) {
    throw new ConfigurationError(
      `the secret ${secretId} (${what}) is not usable: ${value === undefined ? 'it has no string value' : `it must be at least ${minLength} characters`}; set it with put-secret-value`,
    );
  }
  if (name === 'auditHmacKey' && isGeneratedPlaceholder(value)) {
    throw new ConfigurationError(
      `the secret ${secretId} (${what}) still holds the placeholder CloudFormation generated (32 characters of every kind), which nobody saved: ` +
        `set the real key, e.g. openssl rand -hex 32 | tr -d '\\n' > /tmp/audit-key.txt and ` +
        `aws secretsmanager put-secret-value --secret-id ${secretId} --secret-string file:///tmp/audit-key.txt, and keep a copy in your vault (docs/deploy.md, "Setting the secrets"); ` +
        'a key of your own in that shape is refused too: use a longer one',
    );
  }
  return value;
}
