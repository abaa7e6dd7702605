/**
 * docs/local.md's AWS CLI examples name keys the product writes: the audit record keys of its
 * commands are what the audit trail names records, and the ledger key is the table's own.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { auditRecordKey, parseRecordKey } from '../../../lambdas/shared/audit.ts';
import { LEDGER_TABLE } from '../../../lambdas/shared/ledger/table.ts';

const DOC = fileURLToPath(new URL('../../../docs/local.md', import.meta.url));
const REQUEST_ID = '0f6b1c2e-4d1a-4b7e-9a51-3c2d7e8f9a01';

describe('docs/local.md', () => {
  it('names every audit record by the key the audit trail writes: audit/<request_id>/<seq>.json', async () => {
    // Prepare: every audit/$REQ/<name> the page names, in the commands and in the text.
    const text = await readFile(DOC, 'utf8');
    const named = [...text.matchAll(/audit\/\$REQ\/([^\s/`]+)/g)].map((match) => match[1] ?? '');
    const retention = /get-object-retention [^\n]*--key (\S+)/.exec(text)?.[1];

    // Assess
    expect(named.length).toBeGreaterThan(0);
    expect(retention).toBe('audit/$REQ/000000.json');
    for (const name of named) {
      const key = `audit/${REQUEST_ID}/${name}`;
      const parsed = parseRecordKey(key);
      expect(parsed, key).toBeDefined();
      expect(auditRecordKey(REQUEST_ID, parsed?.seq ?? -1), key).toBe(key);
    }
  });

  it("gives the ledger's get-item the table's own key, request_id", async () => {
    // Prepare
    const text = await readFile(DOC, 'utf8');
    const getItem = /dynamodb get-item --table-name svc-dsr-ledger --key "(.*)"$/m.exec(text)?.[1];
    const [hash] = LEDGER_TABLE.KeySchema ?? [];

    // Assess
    expect(getItem).toBeDefined();
    const key: unknown = JSON.parse((getItem ?? '').replaceAll('\\"', '"').replace('$REQ', REQUEST_ID));
    expect(key).toEqual({ [hash?.AttributeName ?? '']: { S: REQUEST_ID } });
    expect(text).toContain('partition key `request_id`');
  });
});
