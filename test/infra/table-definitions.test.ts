import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { GATE_TABLE, LEDGER_TABLE, type TableDefinition } from '#shared/ledger/table';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { type CfnObject, productionConfig } from './fixtures.ts';

/** The keys and indexes of a table, as comparable data (attribute definitions in name order). */
function keysAndIndexes(table: CfnObject | TableDefinition) {
  const byName = (a: { AttributeName?: string }, b: { AttributeName?: string }) =>
    (a.AttributeName ?? '').localeCompare(b.AttributeName ?? '');
  return {
    AttributeDefinitions: [...(table.AttributeDefinitions ?? [])].sort(byName),
    KeySchema: table.KeySchema,
    GlobalSecondaryIndexes: (table.GlobalSecondaryIndexes ?? []).map((index: CfnObject) => ({
      IndexName: index.IndexName,
      KeySchema: index.KeySchema,
      Projection: index.Projection,
    })),
  };
}

describe('table definitions', () => {
  // Arrange: the stack as deployed, without bundling.
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const tables = Template.fromStack(new DsrStack(app, 'Test', { config: productionConfig })).findResources(
    'AWS::DynamoDB::Table',
  );
  const stackTable = (prefix: string): CfnObject => {
    const [id] = Object.keys(tables).filter((logicalId) => logicalId.startsWith(prefix));
    return tables[id ?? '']?.Properties;
  };

  it('creates the ledger where no stack does with the keys and indexes the stack gives it', () => {
    // Act
    const stack = keysAndIndexes(stackTable('Ledger'));

    // Assert
    expect(stack.GlobalSecondaryIndexes.length).toBeGreaterThan(0);
    expect(keysAndIndexes(LEDGER_TABLE)).toEqual(stack);
  });

  it("creates the platform gate's table where no stack does with the keys and index the stack gives it", () => {
    // Act
    const stack = keysAndIndexes(stackTable('PlatformGate'));

    // Assert
    expect(stack.GlobalSecondaryIndexes.length).toBeGreaterThan(0);
    expect(keysAndIndexes(GATE_TABLE)).toEqual(stack);
  });
});
