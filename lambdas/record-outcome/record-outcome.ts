// The RecordOutcome step: marks the request completed with its outcome and writes the final audit record.
import type { z } from 'zod';
import { platformKeepsFacts } from '#shared/erasure-scope';
import { LedgerStateError } from '#shared/errors';
import type { LedgerItem } from '#shared/ledger';
import { settlePart } from '#shared/site-parts';
import type { StepDeps } from '#shared/step-deps';
import { recordOutcomeInputSchema, recordOutcomeOutputSchema } from '#shared/step-io';
import { buildSitesPackage } from '../build-package/sites-package.ts';

/** What must be in the ledger before an outcome can be recorded, and what to say when it is not. */
const EVIDENCE = {
  erased: { field: 'erasure_verification', missing: 'an erasure is recorded only once it has been verified' },
  exported: { field: 'archive', missing: 'an export is recorded only once its archive has been verified' },
  corrected: {
    field: 'correction',
    missing: 'a correction is recorded only once the re-read has confirmed it',
  },
  corrected_with_changes: {
    field: 'correction',
    missing: 'a correction is recorded only once the re-read has confirmed it',
  },
  no_data: undefined,
} as const;

/**
 * Marks the request completed with its outcome and writes the final audit record. The ledger write
 * holds only on a running request that has the outcome's evidence (a verified erasure, a verified
 * archive), so the request is read only when it does not. Idempotent: a re-run after the ledger
 * write (the audit append failed, or the Lambda died before it) writes the final record it is
 * missing, with the facts the ledger kept; the trail keeps one record per event.
 */
export async function recordOutcome(
  input: z.infer<typeof recordOutcomeInputSchema>,
  deps: StepDeps,
): Promise<z.infer<typeof recordOutcomeOutputSchema>> {
  const evidence = EVIDENCE[input.outcome];
  // An export slot still held (a no_data answer, an archive from an earlier run) is given back.
  await deps.gate.releaseExport(input.request_id);
  let item: LedgerItem;
  try {
    item = await deps.ledger.update(
      input.request_id,
      {
        status: 'completed',
        outcome: input.outcome,
        step: null,
        error: null,
        completed_at: deps.clock().toISOString(),
      },
      ['running'],
      evidence === undefined ? [] : [evidence.field],
    );
  } catch (error) {
    if (!(error instanceof LedgerStateError)) throw error;
    item = await deps.ledger.require(input.request_id);
    if (item.status !== 'completed') {
      throw evidence !== undefined && item[evidence.field] === undefined
        ? new LedgerStateError(evidence.missing)
        : error;
    }
  }
  const outcome = item.outcome ?? input.outcome;
  const completedAt = item.completed_at ?? item.updated_at;
  await deps.audit.append(input.request_id, {
    eventId: 'RecordOutcome',
    step: 'RecordOutcome',
    action: 'request_completed',
    facts: {
      outcome,
      completed_at: item.completed_at ?? null,
      due_at: item.due_at ?? null,
      on_time: item.due_at === undefined ? null : completedAt <= item.due_at,
      archive_sha256: item.archive?.sha256 ?? null,
      ...(item.correction_fields === undefined
        ? {}
        : { correction_fields: item.correction_fields.join(',') }),
      ...(outcome === 'erased' ? platformKeepsFacts() : {}),
    },
    final: true,
  });
  deps.logger.info('request completed', { outcome });
  // A site's part of a request: the request learns what this site came to, and ends with the last.
  await settlePart({ ...deps, sitesPackage: (request) => buildSitesPackage(deps, request) }, item);
  return { status: 'completed', outcome };
}

/** The RecordOutcome step: contract and domain function. */
export const recordOutcomeStep = {
  name: 'RecordOutcome',
  input: recordOutcomeInputSchema,
  output: recordOutcomeOutputSchema,
  run: recordOutcome,
} as const;
