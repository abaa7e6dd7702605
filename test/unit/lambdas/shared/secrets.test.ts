import { randomBytes } from 'node:crypto';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigurationError } from '#shared/errors';
import { functionSecretsFromEnv, isGeneratedPlaceholder, SECRETS } from '#shared/secrets';

/**
 * Values of the shape Secrets Manager generates by default for a secret created without a value:
 * 32 characters of ASCII 33-126 with every kind (upper, lower, digit, punctuation) present.
 */
const GENERATED = ['aB3!kLm9#pQr$tUv^wXy&z12*Cd(Ef)G', 'Zz0~"\'`{}|[]\\:;<>?,./-_=+xxxxxxx'];
const SECRET_ID = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:AuditKeySecret-AbCdEf';
const secretsManager = mockClient(SecretsManagerClient);

beforeEach(() => secretsManager.reset());
afterEach(() => secretsManager.reset());

/** The audit key as a function reads it, the secret holding `value`. */
async function readAuditKey(value: string): Promise<string> {
  secretsManager.on(GetSecretValueCommand).resolves({ SecretString: value });
  const { auditHmacKey } = functionSecretsFromEnv({ [SECRETS.auditHmacKey.env]: SECRET_ID });
  return auditHmacKey();
}

describe('the audit key placeholder', () => {
  it('recognises the shape CloudFormation generates and nothing an operator is told to set', () => {
    for (const value of GENERATED) expect(isGeneratedPlaceholder(value)).toBe(true);
    // The deploy guide's key, a base64 key, 33 characters, no punctuation, a space.
    expect(isGeneratedPlaceholder(randomBytes(32).toString('hex'))).toBe(false);
    expect(isGeneratedPlaceholder(randomBytes(32).toString('base64'))).toBe(false);
    expect(isGeneratedPlaceholder(`${GENERATED[0]}x`)).toBe(false);
    expect(isGeneratedPlaceholder('aB3kLm9pQrtUvwXyz12CdEfGhIjKlMnO')).toBe(false);
    expect(isGeneratedPlaceholder('aB3! Lm9#pQr$tUv^wXy&z12*Cd(Ef)G')).toBe(false);
  });

  it.each(GENERATED)(
    'is refused when a function reads it, with what to set and never the value (%#)',
    async (value) => {
      const read = readAuditKey(value);

      await expect(read).rejects.toBeInstanceOf(ConfigurationError);
      const error = await read.catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(Error);
      const message = (error as Error).message;
      expect(message).toContain(SECRET_ID);
      expect(message).toContain('placeholder');
      expect(message).toContain('openssl rand -hex 32');
      expect(message).toContain('put-secret-value');
      expect(message).not.toContain(value);
      expect(secretsManager).toHaveReceivedCommandWith(GetSecretValueCommand, { SecretId: SECRET_ID });
    },
  );

  it('accepts a key set as the deploy guide says', async () => {
    const key = randomBytes(32).toString('hex');
    await expect(readAuditKey(key)).resolves.toBe(key);
  });

  it('leaves the platform tokens to the platform, whatever their shape', async () => {
    secretsManager.on(GetSecretValueCommand).resolves({ SecretString: GENERATED[0] });
    const { ssoAccessToken } = functionSecretsFromEnv({
      [SECRETS.auditHmacKey.env]: SECRET_ID,
      [SECRETS.ssoAccessToken.env]: 'sso-token-secret',
    });
    await expect(ssoAccessToken?.()).resolves.toBe(GENERATED[0]);
  });
});
