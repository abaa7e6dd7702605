/** A request: its facts and deadlines, what each site came to, its audit chains, and its actions. */
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { Api } from '../api.ts';
import { DaysLeft, Show, useLoad } from '../parts.tsx';
import { localDateTime } from '../time.ts';
import type { RequestDetail, TimelineAnswer, VerifyAnswer } from '../types.ts';
import { Actions } from './actions.tsx';

function Facts({ request, timeZone }: { readonly request: RequestDetail; readonly timeZone: string }) {
  const rows: [string, ComponentChildren][] = [
    ['Status', `${request.status}${request.step === null ? '' : ` (${request.step})`}`],
    ['Type', `${request.type ?? '—'} under ${request.regulation?.toUpperCase() ?? '—'}`],
    ['Outcome', request.outcome ?? '—'],
    ['Reference', request.reference ?? '—'],
    ['Received', `${localDateTime(request.received_at, timeZone)} ${timeZone}`],
    [
      'Due',
      <>
        {localDateTime(request.due_at, timeZone)} {timeZone}{' '}
        {request.completed_at === null ? <DaysLeft dueAt={request.due_at} timeZone={timeZone} /> : null}
        {request.extended ? ' (extended)' : ''}
      </>,
    ],
    [
      'Completed',
      request.completed_at === null ? '—' : `${localDateTime(request.completed_at, timeZone)} ${timeZone}`,
    ],
    ['Sites', request.sites?.join(', ') ?? 'the only site'],
  ];
  if (request.primary_key !== undefined) rows.push(['Subject key', <code>{request.primary_key}</code>]);
  return (
    <dl class="facts">
      {rows.map(([name, value]) => (
        <div key={name}>
          <dt>{name}</dt>
          <dd>{value}</dd>
        </div>
      ))}
    </dl>
  );
}

/** The notices a request owes the subject and those given: the receipt (CCPA), the extension, the response or denial. */
export function noticesOf(request: RequestDetail): { kind: string; state: string; at: string | null }[] {
  const rows: { kind: string; state: string; at: string | null }[] = [];
  const given = (kind: 'receipt' | 'extension' | 'response' | 'denial') => request.notices[kind];
  if (request.confirm_by !== null || given('receipt') !== undefined) {
    const receipt = given('receipt');
    rows.push(
      receipt === undefined
        ? { kind: 'receipt', state: 'due by', at: request.confirm_by }
        : { kind: 'receipt', state: `given by ${receipt.channel}`, at: receipt.at },
    );
  }
  const extension = given('extension');
  if (extension !== undefined)
    rows.push({ kind: 'extension', state: `given by ${extension.channel}`, at: extension.at });
  const answer =
    request.status === 'completed' ? 'response' : request.status === 'denied' ? 'denial' : undefined;
  if (answer !== undefined) {
    const notice = given(answer);
    rows.push(
      notice === undefined
        ? { kind: answer, state: 'due now', at: null }
        : { kind: answer, state: `given by ${notice.channel}`, at: notice.at },
    );
  }
  return rows;
}

function Notices({ request, timeZone }: { readonly request: RequestDetail; readonly timeZone: string }) {
  const rows = noticesOf(request);
  if (rows.length === 0) return null;
  return (
    <>
      <h2>Notices to the subject</h2>
      <ul class="notices">
        {rows.map((row) => (
          <li key={row.kind} class={row.state.startsWith('due') ? 'owed' : ''}>
            <strong>{row.kind}</strong>: {row.state}
            {row.at === null ? '' : ` ${localDateTime(row.at, timeZone)} ${timeZone}`}
          </li>
        ))}
      </ul>
    </>
  );
}

function Timeline({ timeline, timeZone }: { readonly timeline: TimelineAnswer; readonly timeZone: string }) {
  return (
    <>
      {timeline.chains.map((chain) => (
        <section key={chain.chain} aria-label={`Audit chain: ${chain.kind}`}>
          <h3>
            {chain.kind === 'request' ? 'Steps and actions' : chain.kind}{' '}
            <span class={chain.state.ok && chain.state.matches_ledger ? 'chain ok' : 'chain broken'}>
              {chain.state.ok
                ? chain.state.matches_ledger
                  ? `chain intact, ${chain.state.records} records`
                  : 'chain does not match the ledger'
                : `chain broken at record ${chain.state.at}: ${chain.state.problem}`}
            </span>
          </h3>
          <ol class="timeline">
            {chain.records.map((record) => (
              <li key={record.seq}>
                <time dateTime={record.at}>{localDateTime(record.at, timeZone)}</time>{' '}
                <strong>{record.action.replace(/_/g, ' ')}</strong> <span class="muted">{record.step}</span>
                {typeof record.facts.operator === 'string' ? <span> by {record.facts.operator}</span> : null}
                {typeof record.facts.reason === 'string' ? <span>: “{record.facts.reason}”</span> : null}
              </li>
            ))}
          </ol>
        </section>
      ))}
    </>
  );
}

function Verification({ api, requestId }: { readonly api: Api; readonly requestId: string }) {
  const [asked, setAsked] = useState(false);
  if (!asked)
    return (
      <button type="button" class="secondary" onClick={() => setAsked(true)}>
        Verify the archive, the package and the chains
      </button>
    );
  return <VerifyResult api={api} requestId={requestId} />;
}

function VerifyResult({ api, requestId }: { readonly api: Api; readonly requestId: string }) {
  const [loaded] = useLoad(
    () => api.get<VerifyAnswer>(`/requests/${encodeURIComponent(requestId)}/verify`),
    [requestId],
  );
  return (
    <Show loaded={loaded}>
      {(verified) => (
        <div role="status" class={verified.ok ? 'done' : 'problem'}>
          {verified.ok ? 'Verified: ' : 'Not verified: '}
          archive {verified.archive.status}, package {verified.subject_package.status}, audit chain{' '}
          {verified.audit.ok
            ? `intact (${verified.audit.records} records)`
            : `broken: ${verified.audit.problem}`}
          {verified.findings.length === 0 ? null : (
            <ul>
              {verified.findings.map((finding) => (
                <li>
                  {finding.check}: {finding.detail}
                </li>
              ))}
            </ul>
          )}
        </div>
      )}
    </Show>
  );
}

/** The statuses of a request the workflow is moving on its own. */
const MOVING = new Set(['received', 'running']);
const FOLLOW_MS = 3000;

export function RequestPage({
  api,
  requestId,
  canAct,
}: {
  readonly api: Api;
  readonly requestId: string;
  readonly canAct: boolean;
}) {
  const path = `/requests/${encodeURIComponent(requestId)}`;
  const [message, setMessage] = useState<ComponentChildren>();
  const [loaded, reload] = useLoad(async () => {
    const [detail, timeline] = await Promise.all([
      api.get<{ request: RequestDetail }>(path),
      api.get<TimelineAnswer>(`${path}/timeline`),
    ]);
    return { request: detail.request, timeline };
  }, [requestId]);
  const timeZone = api.config.time_zone;
  const moving = loaded.state === 'done' && MOVING.has(loaded.value.request.status);
  // A request on its way is read again every few seconds, so the page follows it to its end.
  useEffect(() => {
    if (!moving) return;
    const timer = setInterval(reload, FOLLOW_MS);
    return () => clearInterval(timer);
  }, [moving, reload]);
  return (
    <section aria-labelledby="request-title">
      <h1 id="request-title">Request {requestId.slice(0, 8)}</h1>
      <p class="muted">
        <code>{requestId}</code>{' '}
        <button type="button" class="secondary" onClick={reload}>
          Refresh
        </button>
        {moving ? ' (on its way: read again every few seconds)' : null}
      </p>
      {message === undefined ? null : (
        <p class="done" role="status">
          {message}
        </p>
      )}
      <Show loaded={loaded}>
        {({ request, timeline }) => (
          <>
            <Facts request={request} timeZone={timeZone} />
            {request.error === null ? null : (
              <div class="problem">
                <strong>Error {request.error.code}:</strong> {request.error.message}
              </div>
            )}
            {request.intake_warnings.includes('primary_key_mixed_scripts') ? (
              <div class="problem">
                <strong>Check the key:</strong> it mixes letters of different scripts, so it may be a
                look-alike of the key the site meant.
              </div>
            ) : null}
            <Notices request={request} timeZone={timeZone} />
            {request.site_results === null ? null : (
              <>
                <h2>Sites</h2>
                <ul>
                  {Object.entries(request.site_results).map(([site, result]) => (
                    <li key={site}>
                      {site}: {result.status}
                      {result.outcome === undefined ? '' : ` (${result.outcome})`} at{' '}
                      {localDateTime(result.at, timeZone)}
                    </li>
                  ))}
                </ul>
              </>
            )}
            {canAct ? (
              <Actions
                request={request}
                api={api}
                onChanged={(done) => {
                  setMessage(done);
                  reload();
                }}
              />
            ) : null}
            <h2>Timeline</h2>
            <Verification api={api} requestId={requestId} />
            <Timeline timeline={timeline} timeZone={timeZone} />
          </>
        )}
      </Show>
    </section>
  );
}
