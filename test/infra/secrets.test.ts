import { describe, expect, it } from 'vitest';
import { synthesizeTemplate } from '../../lib/template.ts';
import type { CfnObject } from './fixtures.ts';

const resources = synthesizeTemplate().Resources as Record<string, { Type: string; Properties: CfnObject }>;

describe('the secrets the stack creates', () => {
  it('are generated with Secrets Manager defaults, the shape the functions refuse as a placeholder', () => {
    // Assess
    // isGeneratedPlaceholder (lambdas/shared/secrets.ts) recognises the default: 32 characters
    // of every kind. Other generation settings would need another check, and changing them on a
    // deployed stack would make CloudFormation generate a new value over the key an operator set.
    const secrets = Object.values(resources).filter(
      (resource) => resource.Type === 'AWS::SecretsManager::Secret',
    );
    expect(secrets).toHaveLength(3);
    for (const secret of secrets) {
      expect(secret.Properties.GenerateSecretString).toEqual({});
      expect(secret.Properties.SecretString).toBeUndefined();
    }
  });
});
