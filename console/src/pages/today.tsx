/** Today: what needs a person now: requests due soon, requests that failed, and how many of each. */
import type { Api } from '../api.ts';
import { Show, useLoad } from '../parts.tsx';
import { href } from '../route.ts';
import type { ListAnswer } from '../types.ts';
import { listQuery, RequestTable } from './requests.tsx';

/** A request due within this many days is "due soon". */
export const DUE_SOON_DAYS = 10;

interface Counts {
  readonly by_status: { readonly received: number; readonly running: number; readonly failed: number };
  readonly due: number | null;
}

const DAY_MS = 24 * 3600 * 1000;

export function TodayPage({ api }: { readonly api: Api }) {
  const timeZone = api.config.time_zone;
  const [loaded] = useLoad(async () => {
    const query = (filters: Parameters<typeof listQuery>[0]) =>
      api.get<ListAnswer>('/requests', listQuery(filters));
    const none = {
      status: undefined,
      type: undefined,
      regulation: undefined,
      reference: undefined,
      due_within: undefined,
    };
    const [dueSoon, failed, counts] = await Promise.all([
      query({ ...none, due_within: String(DUE_SOON_DAYS) }),
      query({ ...none, status: 'failed' }),
      api.get<Counts>('/requests/counts', {
        due_to: new Date(Date.now() + DUE_SOON_DAYS * DAY_MS).toISOString(),
      }),
    ]);
    return { dueSoon, failed, counts };
  }, []);
  return (
    <section aria-labelledby="today-title">
      <h1 id="today-title">Today</h1>
      <p class="muted">Dates and days left are in {timeZone}.</p>
      <Show loaded={loaded}>
        {({ dueSoon, failed, counts }) => (
          <>
            <ul class="counts" aria-label="Counts">
              <li>
                <a href={href('requests', { due_within: String(DUE_SOON_DAYS) })}>
                  <strong>{counts.due ?? 0}</strong> due within {DUE_SOON_DAYS} days
                </a>
              </li>
              <li>
                <a href={href('requests', { status: 'failed' })}>
                  <strong>{counts.by_status.failed}</strong> failed
                </a>
              </li>
              <li>
                <a href={href('requests', { status: 'received' })}>
                  <strong>{counts.by_status.received}</strong> received, not yet running
                </a>
              </li>
              <li>
                <a href={href('requests', { status: 'running' })}>
                  <strong>{counts.by_status.running}</strong> running
                </a>
              </li>
            </ul>
            <h2>Failed: each needs a retry, a denial or a cancel</h2>
            {failed.requests.length === 0 ? (
              <p>None.</p>
            ) : (
              <ul class="failures">
                {failed.requests.map((request) => (
                  <li key={request.request_id}>
                    <a href={`#/requests/${encodeURIComponent(request.request_id)}`}>
                      {request.reference ?? request.request_id.slice(0, 8)}
                    </a>{' '}
                    {request.type} at {request.step ?? 'an unknown step'}: open it to see the error and what
                    to do
                  </li>
                ))}
              </ul>
            )}
            <h2>Due within {DUE_SOON_DAYS} days</h2>
            <RequestTable
              requests={dueSoon.requests}
              timeZone={timeZone}
              caption="Due soon, earliest first"
            />
          </>
        )}
      </Show>
    </section>
  );
}
