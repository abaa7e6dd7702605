import { describe, expect, it } from 'vitest';
import type { AuditRecord } from '#shared/audit';
import { ledgerMismatches } from '#shared/evidence/ledger-facts';
import { ledgerRecord } from '../../../cli/helpers.ts';

const at = '2026-11-03T00:00:00.000Z';
/** A request over news and forum, ended: exported on news, no data on forum. */
const item = ledgerRecord({
  status: 'completed',
  step: undefined,
  outcome: 'exported',
  completed_at: at,
  sites: ['news', 'forum'],
  site_results: {
    news: { status: 'completed', outcome: 'exported', at },
    forum: { status: 'completed', outcome: 'no_data', at },
  },
});
/** Its final record, as settlePart writes it. */
const chain = [
  {
    seq: 3,
    at,
    action: 'request_completed',
    step: 'RecordOutcome',
    final: true,
    facts: { outcome: 'exported', completed_at: at, sites: 'exported on 1 (news); no data on 1 (forum)' },
  },
] as unknown as AuditRecord[];

describe('the ledger of a request over several sites against its final record', () => {
  it('agrees when each site came to what the record locked', () => {
    expect(ledgerMismatches(item, chain)).toEqual([]);
  });

  it("names a site's result edited after the final record", () => {
    // Prepare: forum's result rewritten to say it exported
    const edited = {
      ...item,
      site_results: {
        ...item.site_results,
        forum: { status: 'completed' as const, outcome: 'exported' as const, at },
      },
    };

    // Act
    const problems = ledgerMismatches(edited, chain);

    // Assess
    expect(problems).toEqual([
      `the ledger's sites is "exported on 2 (news, forum)"; record 3 (request_completed) locked "exported on 1 (news); no data on 1 (forum)"`,
    ]);
  });
});
