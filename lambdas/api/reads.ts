// The API's reads of requests: one opened, a page of the open ones, and a request's timeline of audit records with the state of each chain.
import type { z } from 'zod';
import { sideChainOf } from '#shared/audit-chains';
import { verifierTrail } from '#shared/evidence/chains';
import {
  type LedgerItem,
  maskedKey,
  NOTICE_KINDS,
  OpenCursorError,
  OWED_STATUSES,
  SIDE_CHAINS,
} from '#shared/ledger';
import { ApiFailure } from './answers.ts';
import type { ApiDeps } from './deps.ts';
import type { countsQuerySchema, listQuerySchema, RequestDetail, timelineAnswerSchema } from './schemas.ts';

/** How many requests a page holds when the caller does not say. */
export const DEFAULT_PAGE = 50;

export async function requireItem(deps: ApiDeps, requestId: string): Promise<LedgerItem> {
  const item = await deps.ledger.get(requestId);
  if (item === undefined)
    throw new ApiFailure(404, 'unknown_request', `no request ${requestId} in the ledger`);
  return item;
}

/** A ledger item as the API shows it opened; the primary_key only where `withKey`. */
export function detailOf(item: LedgerItem, withKey: boolean): RequestDetail {
  return {
    request_id: item.request_id,
    status: item.status,
    step: item.step ?? null,
    type: item.type ?? null,
    regulation: item.regulation ?? null,
    outcome: item.outcome ?? null,
    received_at: item.received_at ?? null,
    due_at: item.due_at ?? null,
    extended: item.extended,
    completed_at: item.completed_at ?? null,
    error: item.error === undefined ? null : { code: item.error.code, message: item.error.message },
    reference: item.reference ?? null,
    sites: item.sites ?? null,
    site_results: item.site_results ?? null,
    confirm_by: item.confirm_by ?? null,
    intake_warnings: item.intake_warnings ?? [],
    notices: Object.fromEntries(
      NOTICE_KINDS.flatMap((kind) => {
        const notice = item[`notice_${kind}`];
        return notice === undefined
          ? []
          : [[kind, { channel: notice.channel, at: notice.at, recorded_at: notice.recorded_at }]];
      }),
    ),
    ...(withKey && item.primary_key !== undefined ? { primary_key: item.primary_key } : {}),
  };
}

function maskedOf(key: string | undefined): string | null {
  return key === undefined ? null : maskedKey(key);
}

/** A page of the open requests under the query's filters, earliest due first, each key masked. */
export async function listOpen(deps: ApiDeps, query: z.infer<typeof listQuerySchema>) {
  try {
    const page = await deps.ledger.openPage(
      {
        statuses: query.status ?? OWED_STATUSES,
        ...(query.type === undefined ? {} : { types: query.type }),
        ...(query.regulation === undefined ? {} : { regulations: query.regulation }),
        ...(query.due_from === undefined ? {} : { dueFrom: new Date(query.due_from).toISOString() }),
        ...(query.due_to === undefined ? {} : { dueTo: new Date(query.due_to).toISOString() }),
        ...(query.reference === undefined ? {} : { reference: query.reference }),
      },
      { limit: query.limit ?? DEFAULT_PAGE, ...(query.cursor === undefined ? {} : { cursor: query.cursor }) },
    );
    const keys = await deps.ledger.primaryKeys(page.requests.map((request) => request.request_id));
    return {
      requests: page.requests.map((request) => ({
        request_id: request.request_id,
        masked_key: maskedOf(keys.get(request.request_id)),
        status: request.status,
        step: request.step ?? null,
        type: request.type ?? null,
        regulation: request.regulation ?? null,
        outcome: request.outcome ?? null,
        reference: request.reference ?? null,
        received_at: request.received_at ?? null,
        due_at: request.due_at ?? null,
        extended: request.extended,
      })),
      next: page.next,
    };
  } catch (error) {
    if (error instanceof OpenCursorError) throw new ApiFailure(400, 'invalid', error.message);
    throw error;
  }
}

/**
 * A request's timeline: its own chain and each side chain the ledger records, verified (each
 * record's hash and link), with the ledger's head compared, and its records' steps, actions,
 * times and facts (which hold no subject identifier, only hashes of them outside this answer).
 */
export async function timelineOf(
  deps: ApiDeps,
  requestId: string,
): Promise<z.infer<typeof timelineAnswerSchema>> {
  const item = await requireItem(deps, requestId);
  const trail = verifierTrail(deps);
  const chains = [
    { chain: item.request_id, kind: 'request' as const, head: item.audit_head },
    ...SIDE_CHAINS.filter((side) => side.required(item)).map((side) => ({
      chain: sideChainOf(side.kind, item.request_id),
      kind: side.kind,
      head: item[side.fields.head],
    })),
  ];
  return {
    request_id: item.request_id,
    chains: await Promise.all(
      chains.map(async ({ chain, kind, head }) => {
        const verified = await trail.verify(chain);
        return {
          chain,
          kind,
          state: verified.ok
            ? {
                ok: true as const,
                records: verified.records,
                head: verified.head,
                matches_ledger: verified.head === head,
              }
            : { ok: false as const, problem: verified.problem, at: verified.at },
          records: (verified.ok ? verified.chain : []).map((record) => ({
            seq: record.seq,
            step: record.step,
            action: record.action,
            at: record.at,
            final: record.final,
            facts: record.facts,
          })),
        };
      }),
    ),
  };
}

/** How many requests are open by status, and with `due_to` how many are due by then: counted by the index. */
export async function countsOf(deps: ApiDeps, query: z.infer<typeof countsQuerySchema>) {
  const dueTo = query.due_to === undefined ? undefined : new Date(query.due_to).toISOString();
  const [byStatus, due] = await Promise.all([
    deps.ledger.openCounts({ statuses: OWED_STATUSES }),
    dueTo === undefined ? undefined : deps.ledger.openCounts({ statuses: OWED_STATUSES, dueTo }),
  ]);
  return {
    by_status: byStatus,
    due_to: dueTo ?? null,
    due: due === undefined ? null : due.received + due.running + due.failed,
  };
}
