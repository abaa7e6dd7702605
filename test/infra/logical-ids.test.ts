import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { productionConfig } from './fixtures.ts';

/**
 * Every resource's logical ID and type, as deployed stacks hold them. CloudFormation replaces a
 * resource whose logical ID changes: for the ledger, the buckets and the keys that is data lost or
 * orphaned. A change here must be deliberate: edit the file, and say in the change why the
 * resource may be replaced.
 */
const PINNED = new URL('./logical-ids.json', import.meta.url);

function logicalIds(config: unknown): Record<string, string> {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const resources = Template.fromStack(new DsrStack(app, 'Pinned', { config })).toJSON().Resources as Record<
    string,
    { Type: string }
  >;
  return Object.fromEntries(
    Object.entries(resources)
      .map(([id, resource]) => [id, resource.Type] as const)
      .sort(([a], [b]) => a.localeCompare(b)),
  );
}

describe('logical IDs', () => {
  it('keeps every resource of the production stack under the logical ID it was deployed with', () => {
    // Prepare
    const pinned = JSON.parse(readFileSync(PINNED, 'utf8')) as Record<string, string>;

    // Act / Assess
    expect(logicalIds(productionConfig)).toEqual(pinned);
  });
});
