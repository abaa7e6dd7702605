// The API's report, verification and manifests: the CLI's own checks (lambdas/shared/evidence), within the time API Gateway gives a call.
import type { z } from 'zod';
import { lockedHeadsOf, readManifests } from '#shared/audit-manifest';
import { DEFAULT_TIME_ZONE, endOfLocalDay, startOfLocalDay } from '#shared/deadlines';
import { EvidenceChangedError, EvidenceUnreadableError } from '#shared/evidence/errors';
import { buildReport, type ReportResult } from '#shared/evidence/report';
import { type EvidenceContext, verifyRequest } from '#shared/evidence/verify-request';
import type { LedgerItem } from '#shared/ledger';
import { checkStored } from '../operator/hand-out.ts';
import { ApiFailure } from './answers.ts';
import type { ApiDeps } from './deps.ts';
import {
  type manifestsAnswerSchema,
  type manifestsQuerySchema,
  type reportQuerySchema,
  verifyAnswerSchema,
} from './schemas.ts';

/**
 * How long a report or a verification may read before the API says it cannot finish in time: API
 * Gateway ends an HTTP API call at 30 seconds, so the answer is given a few seconds before.
 */
export const EVIDENCE_BUDGET_MS = 25_000;

/** What verification reads through the API function: the operator's own re-hash of stored objects. */
function evidenceContextOf(deps: ApiDeps): EvidenceContext {
  return {
    ledger: deps.ledger,
    s3: deps.s3,
    clock: deps.clock,
    names: {
      AuditBucketName: deps.names.AuditBucketName,
      TimeZone: deps.evidence.timeZone,
      AccessArchiveRetentionDays: deps.evidence.accessArchiveRetentionDays,
      ErasureArchiveRetentionDays: deps.evidence.erasureArchiveRetentionDays,
    },
    checkStored: async (requestId, object) =>
      await checkStored(deps, { command: 'check_stored', request_id: requestId, object }),
  };
}

/** A bound as an instant: a bare date is the start (`from`) or the end (`to`) of that local day. */
function boundMs(value: string | undefined, edge: 'from' | 'to', timeZone: string): number | undefined {
  if (value === undefined) return undefined;
  const day = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  if (day === null) return Date.parse(value);
  const date = { year: Number(day[1]), month: Number(day[2]), day: Number(day[3]) };
  return (edge === 'from' ? startOfLocalDay(date, timeZone) : endOfLocalDay(date, timeZone)).getTime();
}

/** Runs `work` under a signal that aborts after `budgetMs`; its abort is a 503 that says what to do instead. */
async function withinBudget<T>(
  budgetMs: number,
  instead: string,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const signal = AbortSignal.timeout(budgetMs);
  try {
    return await work(signal);
  } catch (error) {
    if (signal.aborted) {
      throw new ApiFailure(
        503,
        'too_long',
        `this could not be finished within the ${Math.round(budgetMs / 1000)} s an API call has; ${instead}`,
      );
    }
    if (error instanceof EvidenceUnreadableError || error instanceof EvidenceChangedError)
      throw new ApiFailure(503, 'unavailable', error.message);
    throw error;
  }
}

/** The section 7101 records and section 7102 metrics of the requests received in the range. */
export async function reportOf(
  deps: ApiDeps,
  query: z.infer<typeof reportQuerySchema>,
  budgetMs = EVIDENCE_BUDGET_MS,
): Promise<ReportResult> {
  const timeZone = query.time_zone ?? deps.evidence.timeZone ?? DEFAULT_TIME_ZONE;
  const fromMs = boundMs(query.from, 'from', timeZone);
  const toMs = boundMs(query.to, 'to', timeZone);
  if (fromMs !== undefined && toMs !== undefined && fromMs > toMs)
    throw new ApiFailure(400, 'invalid', 'from is after to: give a range that starts before it ends');
  return await withinBudget(
    budgetMs,
    'narrow the range (from, to, regulation) or run svc-dsr report, which has no such limit',
    async (signal) =>
      await buildReport(
        {
          dynamo: deps.evidence.dynamo,
          s3: deps.s3,
          clock: deps.clock,
          names: {
            AuditBucketName: deps.names.AuditBucketName,
            LedgerTableName: deps.evidence.ledgerTableName,
          },
        },
        {
          timeZone,
          signal,
          ...(fromMs === undefined ? {} : { fromMs }),
          ...(toMs === undefined ? {} : { toMs }),
          ...(query.regulation === undefined ? {} : { regulation: query.regulation }),
        },
      ),
  );
}

/** One request verified as `svc-dsr verify` does, its chain's state without its records. */
export async function verificationOf(
  deps: ApiDeps,
  item: LedgerItem,
  budgetMs = EVIDENCE_BUDGET_MS,
): Promise<z.infer<typeof verifyAnswerSchema>> {
  const result = await withinBudget(
    budgetMs,
    `run svc-dsr verify ${item.request_id}, which re-hashes an archive of any size`,
    async () => await verifyRequest(evidenceContextOf(deps), item),
  );
  // The answer's schema leaves out the chain's records, hashes and times: the timeline shows them.
  return verifyAnswerSchema.parse(result);
}

/**
 * The daily manifests, each checked (its schema, its own hash, its day against its key) and chained
 * to the day before, as `verify --all` reads them; with `day`, that day's manifest whole.
 */
export async function manifestsOf(
  deps: ApiDeps,
  query: z.infer<typeof manifestsQuerySchema>,
): Promise<z.infer<typeof manifestsAnswerSchema>> {
  const { manifests, problem } = await readManifests({ s3: deps.s3, bucket: deps.names.AuditBucketName });
  const chosen =
    query.day === undefined ? undefined : manifests.find((manifest) => manifest.day === query.day);
  if (query.day !== undefined && chosen === undefined)
    throw new ApiFailure(
      404,
      'not_found',
      `no readable manifest for ${query.day}: GET /manifests lists the days`,
    );
  return {
    ok: problem === undefined,
    problem: problem ?? null,
    manifests: manifests.map((manifest) => ({
      day: manifest.day,
      schema: manifest.schema,
      written_at: manifest.written_at,
      locked: lockedHeadsOf(manifest).length,
      hash: manifest.hash,
      prev_hash: manifest.prev_hash,
    })),
    ...(chosen === undefined ? {} : { manifest: chosen }),
  };
}
