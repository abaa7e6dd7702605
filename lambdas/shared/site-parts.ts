// A site's part of a request that ended, told to the request: its result kept there, and the request's end once every part has ended.
import { LedgerStateError } from './errors.ts';
import type { Ledger, LedgerItem, SubjectPackageFacts } from './ledger/index.ts';
import { requestVerdict, type SiteResult } from './site-outcomes.ts';
import type { StepDeps } from './step-deps.ts';

/** The error code of a request whose sites' parts ended with one or more failed. */
export const SITES_FAILED_CODE = 'sites_failed';

/**
 * Tells the request a site's part belongs to where that part stands now (after RecordOutcome or
 * RecordFailure wrote it), and ends the request once every part has ended: completed with the
 * outcome its sites came to, or failed naming the sites that failed. Idempotent, and safe when
 * two parts end at once: each result is its own attribute, and only the write that moves the
 * request from open to ended writes its final record. A request not in parts is left alone.
 */
export async function settlePart(
  deps: {
    readonly ledger: Pick<Ledger, 'recordSiteResult' | 'update' | 'require'>;
    /**
     * Builds the package of an access request whose every part completed (sites-package.ts), or
     * answers undefined where no site held data. Only RecordOutcome, which ends the last part of
     * such a request, is given it: a failure never completes one.
     */
    readonly sitesPackage?: (request: LedgerItem) => Promise<SubjectPackageFacts | undefined>;
  } & Pick<StepDeps, 'audit' | 'clock' | 'logger'>,
  part: LedgerItem,
): Promise<void> {
  if (part.parent_request_id === undefined || part.site === undefined) return;
  const result: SiteResult = {
    status: part.status,
    ...(part.outcome === undefined ? {} : { outcome: part.outcome }),
    ...(part.error === undefined ? {} : { error_code: part.error.code }),
    at: part.updated_at,
  };
  const request = await deps.ledger.recordSiteResult(part.parent_request_id, part.site, result);
  if (request?.type === undefined) return;
  const results = request.site_results ?? {};
  const verdict = requestVerdict(request.type, request.sites ?? [], results);
  if (verdict.kind === 'open') return;
  const ended = verdict.kind === 'completed' ? 'completed' : 'failed';
  if (request.status === 'received' || request.status === 'running') {
    const built =
      verdict.kind === 'completed' &&
      request.type === 'access' &&
      request.subject_package === undefined &&
      deps.sitesPackage !== undefined
        ? await deps.sitesPackage(request)
        : undefined;
    try {
      await deps.ledger.update(
        request.request_id,
        verdict.kind === 'completed'
          ? {
              status: 'completed',
              outcome: verdict.outcome,
              step: null,
              error: null,
              completed_at: deps.clock().toISOString(),
              ...(built === undefined ? {} : { subject_package: built }),
            }
          : {
              status: 'failed',
              error: {
                code: SITES_FAILED_CODE,
                message: `failed on ${verdict.failed.join(', ')}: ${verdict.summary}. svc-dsr retry runs again only the sites that did not complete`,
              },
            },
        ['received', 'running'],
      );
    } catch (error) {
      // Ended meanwhile: an operator acted, or another part's step settled it first.
      if (!(error instanceof LedgerStateError)) throw error;
    }
  }
  const now = await deps.ledger.require(request.request_id);
  if (now.status !== ended) return;
  // One final record per ending: named after the results it ends on, so a step run again after
  // the ledger write appends the record it is missing, and never a second one.
  const last = Object.values(results).reduce((latest, each) => (each.at > latest ? each.at : latest), '');
  const built = now.subject_package;
  if (built?.sites !== undefined) {
    await deps.audit.append(request.request_id, {
      eventId: 'SettleParts:package',
      step: 'RecordOutcome',
      action: 'subject_package_built',
      facts: {
        key: built.key,
        bytes: built.bytes,
        sha256: built.sha256,
        version_id: built.version_id ?? null,
        file_name: built.file_name,
        conversation_details: built.conversation_details,
        sites_with_data: built.sites.filter((site) => site.held_data).length,
        sites_without_data: built.sites.filter((site) => !site.held_data).length,
      },
    });
  }
  await deps.audit.append(request.request_id, {
    eventId: `SettleParts:${ended}:${last}`,
    step: 'RecordOutcome',
    action: ended === 'completed' ? 'request_completed' : 'request_failed',
    facts: {
      ...(verdict.kind === 'completed' ? { outcome: verdict.outcome } : { code: SITES_FAILED_CODE }),
      sites: verdict.summary,
      completed_at: now.completed_at ?? null,
      due_at: now.due_at ?? null,
    },
    final: true,
  });
  deps.logger.info('request in parts ended', { status: ended });
}
