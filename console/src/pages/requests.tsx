/** Requests: the open requests, earliest due first, filtered by what the URL says, a page at a time. */
import { useState } from 'preact/hooks';
import type { Api } from '../api.ts';
import { DaysLeft, Field, Show, useLoad } from '../parts.tsx';
import { navigate, type Route } from '../route.ts';
import { localDate } from '../time.ts';
import { type ListAnswer, type ListedRequest, OPEN_STATUSES, REGULATIONS, TYPES } from '../types.ts';

const PAGE = 50;
const DAY_MS = 24 * 3600 * 1000;

/** The filters the URL may hold: none of them a subject identifier. */
export const FILTERS = ['status', 'type', 'regulation', 'due_within', 'reference'] as const;

export function filtersOf(params: URLSearchParams): Record<(typeof FILTERS)[number], string | undefined> {
  return Object.fromEntries(FILTERS.map((name) => [name, params.get(name) ?? undefined])) as Record<
    (typeof FILTERS)[number],
    string | undefined
  >;
}

export function RequestTable({
  requests,
  timeZone,
  caption,
}: {
  readonly requests: readonly ListedRequest[];
  readonly timeZone: string;
  readonly caption: string;
}) {
  if (requests.length === 0) return <p>None.</p>;
  return (
    <div class="scroll">
      <table>
        <caption>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Request</th>
            <th scope="col">Reference</th>
            <th scope="col">Type</th>
            <th scope="col">Status</th>
            <th scope="col">Received</th>
            <th scope="col">Due ({timeZone})</th>
            <th scope="col">Subject</th>
          </tr>
        </thead>
        <tbody>
          {requests.map((request) => (
            <tr key={request.request_id}>
              <td>
                <a href={`#/requests/${encodeURIComponent(request.request_id)}`}>
                  {request.request_id.slice(0, 8)}
                </a>
              </td>
              <td>{request.reference ?? '—'}</td>
              <td>
                {request.type ?? '—'} <span class="muted">{request.regulation?.toUpperCase() ?? ''}</span>
              </td>
              <td>
                {request.status}
                {request.step === null ? '' : <span class="muted"> ({request.step})</span>}
              </td>
              <td>{localDate(request.received_at, timeZone)}</td>
              <td>
                {localDate(request.due_at, timeZone)} <DaysLeft dueAt={request.due_at} timeZone={timeZone} />
                {request.extended ? <span class="muted"> extended</span> : null}
              </td>
              <td>
                <span class="masked" title="masked: open the request to see the key">
                  {request.masked_key ?? '—'}
                </span>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** The API's query for the URL's filters. */
export function listQuery(filters: ReturnType<typeof filtersOf>, now = Date.now()) {
  const within = filters.due_within === undefined ? undefined : Number(filters.due_within);
  return {
    status: filters.status,
    type: filters.type,
    regulation: filters.regulation,
    reference: filters.reference,
    due_to:
      within === undefined || !Number.isFinite(within)
        ? undefined
        : new Date(now + within * DAY_MS).toISOString(),
    limit: String(PAGE),
  };
}

export function RequestsPage({ api, route }: { readonly api: Api; readonly route: Route }) {
  const filters = filtersOf(route.params);
  const key = JSON.stringify(filters);
  const [cursors, setCursors] = useState<{ key: string; stack: readonly string[] }>({ key, stack: [] });
  const stack = cursors.key === key ? cursors.stack : [];
  const cursor = stack.at(-1);
  const [loaded] = useLoad(
    () => api.get<ListAnswer>('/requests', { ...listQuery(filters), cursor }),
    [key, cursor],
  );
  const [draft, setDraft] = useState(filters);
  const draftKey = JSON.stringify(filters);
  const [draftFor, setDraftFor] = useState(draftKey);
  if (draftFor !== draftKey) {
    setDraftFor(draftKey);
    setDraft(filters);
  }
  const set = (name: (typeof FILTERS)[number]) => (event: Event) =>
    setDraft({
      ...draft,
      [name]: (event.currentTarget as HTMLInputElement | HTMLSelectElement).value || undefined,
    });
  return (
    <section aria-labelledby="requests-title">
      <h1 id="requests-title">Requests</h1>
      <form
        class="filters"
        aria-label="Filters"
        onSubmit={(event) => {
          event.preventDefault();
          navigate('requests', draft);
        }}
      >
        <Field label="Status">
          <select value={draft.status ?? ''} onChange={set('status')}>
            <option value="">any open</option>
            {OPEN_STATUSES.map((status) => (
              <option value={status}>{status}</option>
            ))}
          </select>
        </Field>
        <Field label="Type">
          <select value={draft.type ?? ''} onChange={set('type')}>
            <option value="">any</option>
            {TYPES.map((type) => (
              <option value={type}>{type}</option>
            ))}
          </select>
        </Field>
        <Field label="Regulation">
          <select value={draft.regulation ?? ''} onChange={set('regulation')}>
            <option value="">any</option>
            {REGULATIONS.map((regulation) => (
              <option value={regulation}>{regulation.toUpperCase()}</option>
            ))}
          </select>
        </Field>
        <Field label="Due within (days)">
          <input
            type="number"
            min="0"
            max="400"
            inputMode="numeric"
            value={draft.due_within ?? ''}
            onInput={set('due_within')}
          />
        </Field>
        <Field label="Reference">
          <input type="text" maxLength={128} value={draft.reference ?? ''} onInput={set('reference')} />
        </Field>
        <button type="submit">Apply filters</button>
      </form>
      <Show loaded={loaded}>
        {(page) => (
          <>
            <RequestTable
              requests={page.requests}
              timeZone={api.config.time_zone}
              caption={`Open requests, earliest due first (page ${stack.length + 1})`}
            />
            <nav class="pager" aria-label="Pages">
              <button
                type="button"
                disabled={stack.length === 0}
                onClick={() => setCursors({ key, stack: stack.slice(0, -1) })}
              >
                Previous page
              </button>
              <button
                type="button"
                disabled={page.next === null}
                onClick={() => page.next !== null && setCursors({ key, stack: [...stack, page.next] })}
              >
                Next page
              </button>
            </nav>
          </>
        )}
      </Show>
    </section>
  );
}
