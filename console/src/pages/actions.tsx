/**
 * The actions a request's status allows, each a form with its reason, then a confirmation that
 * says what will happen, then the API's answer. Shown only to a role that may act; the API refuses
 * anyone else whatever the page shows.
 */
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { DENIAL_CODES, NOTICE_KINDS } from '../../../lambdas/shared/vocabulary.ts';
import type { Api, ApiError } from '../api.ts';
import { asApiError, Field, Problem } from '../parts.tsx';
import { instantInZone, localDateTime, wallClockNow } from '../time.ts';
import type { RequestDetail } from '../types.ts';

type ActionName = 'cancel' | 'deny' | 'extend' | 'retry' | 'notice' | 'package';

const OPEN = new Set(['received', 'running', 'failed']);

/** The actions a request in this state takes. */
export function actionsFor(request: RequestDetail): ActionName[] {
  const actions: ActionName[] = [];
  if (request.status === 'failed') actions.push('retry');
  if (OPEN.has(request.status)) {
    if (!request.extended) actions.push('extend');
    actions.push('deny', 'cancel');
  }
  actions.push('notice');
  if (request.status === 'completed' && request.type === 'access' && request.outcome === 'exported')
    actions.push('package');
  return actions;
}

const LABELS: Record<ActionName, string> = {
  retry: 'Retry',
  extend: 'Extend the deadline',
  deny: 'Deny',
  cancel: 'Cancel',
  notice: 'Record a notice',
  package: 'Hand out the package',
};

interface Draft {
  reason: string;
  reason_code: string;
  channel: string;
  at: string;
  reference: string;
  kind: string;
  minutes: string;
  raw: boolean;
}

function bodyOf(
  action: ActionName,
  draft: Draft,
  timeZone: string,
): { body: Record<string, unknown>; problem?: string } {
  const reason = draft.reason.trim();
  const notice = () => {
    const at = instantInZone(draft.at, timeZone);
    return {
      channel: draft.channel.trim(),
      at: at ?? '',
      ...(draft.reference.trim() === '' ? {} : { reference: draft.reference.trim() }),
    };
  };
  switch (action) {
    case 'cancel':
      return { body: { reason } };
    case 'deny':
      return { body: { reason_code: draft.reason_code, reason } };
    case 'extend':
      return { body: { reason, notice: notice() } };
    case 'retry':
      return { body: reason === '' ? {} : { reason } };
    case 'notice':
      return { body: { kind: draft.kind, notice: notice() } };
    case 'package':
      return {
        body: {
          expires_in: Math.round(Number(draft.minutes) * 60),
          ...(draft.raw ? { raw: true } : {}),
          ...(reason === '' ? {} : { reason }),
        },
      };
  }
}

/** What the confirmation says will happen. */
function consequence(action: ActionName, request: RequestDetail, draft: Draft, timeZone: string): string {
  switch (action) {
    case 'cancel':
      return 'The request stops where it is and is closed as cancelled. This cannot be undone.';
    case 'deny':
      return `The request is closed as denied (${draft.reason_code}); a denial notice to the subject is then due. This cannot be undone.`;
    case 'extend':
      return `The deadline (now ${localDateTime(request.due_at, timeZone)} ${timeZone}) moves out by the regulation's extension, once only, with the notice you gave on record.`;
    case 'retry':
      return 'A new run starts from where the request failed.';
    case 'notice':
      return `A ${draft.kind} notice sent through ${draft.channel || '…'} at ${draft.at.replace('T', ' ')} ${timeZone} is recorded.`;
    case 'package':
      return `A link to the ${draft.raw ? "platform's raw archive" : "subject's package"}, valid for ${draft.minutes} minutes, is made and the hand-out recorded under your name. Send it only to the verified subject.`;
  }
}

function ActionForm({
  action,
  request,
  api,
  onDone,
  onClose,
}: {
  readonly action: ActionName;
  readonly request: RequestDetail;
  readonly api: Api;
  readonly onDone: (message: ComponentChildren) => void;
  readonly onClose: () => void;
}) {
  const timeZone = api.config.time_zone;
  const [draft, setDraft] = useState<Draft>({
    reason: '',
    reason_code: DENIAL_CODES[0],
    channel: 'email',
    at: wallClockNow(timeZone),
    reference: '',
    kind: request.status === 'completed' ? 'response' : 'receipt',
    minutes: '60',
    raw: false,
  });
  const [stage, setStage] = useState<'edit' | 'confirm' | 'sending'>('edit');
  const [error, setError] = useState<ApiError | undefined>();
  const text = (name: keyof Draft) => (event: Event) =>
    setDraft({ ...draft, [name]: (event.currentTarget as HTMLInputElement).value });
  const needsReason = action === 'cancel' || action === 'deny' || action === 'extend';
  const hasNotice = action === 'extend' || action === 'notice';
  const send = async () => {
    setStage('sending');
    setError(undefined);
    try {
      const { body } = bodyOf(action, draft, timeZone);
      const path = `/requests/${encodeURIComponent(request.request_id)}/${action}`;
      const answer = await api.post<{ result: Record<string, unknown> }>(path, body);
      if (action === 'package') {
        const result = answer.result as { url: string; file_name: string; expires_at: string };
        onDone(
          <>
            Package handed out and recorded.{' '}
            <a href={result.url} rel="noreferrer" download={result.file_name}>
              Download {result.file_name}
            </a>{' '}
            (the link works until {localDateTime(result.expires_at, timeZone)} {timeZone}).
          </>,
        );
      } else onDone(`${LABELS[action]}: done and recorded under your name.`);
    } catch (caught) {
      setError(asApiError(caught));
      setStage('edit');
    }
  };
  const headingId = `action-${action}`;
  return (
    <section class="action" aria-labelledby={headingId}>
      <h3 id={headingId}>{LABELS[action]}</h3>
      {error === undefined ? null : <Problem error={error} />}
      {stage === 'edit' ? (
        <form
          onSubmit={(event) => {
            event.preventDefault();
            setStage('confirm');
          }}
        >
          {action === 'deny' ? (
            <Field label="Ground">
              <select value={draft.reason_code} onChange={text('reason_code')}>
                {DENIAL_CODES.map((code) => (
                  <option value={code}>{code.replace(/_/g, ' ')}</option>
                ))}
              </select>
            </Field>
          ) : null}
          {action === 'notice' ? (
            <Field label="Notice">
              <select value={draft.kind} onChange={text('kind')}>
                {NOTICE_KINDS.map((kind) => (
                  <option value={kind}>{kind}</option>
                ))}
              </select>
            </Field>
          ) : null}
          {hasNotice ? (
            <>
              <Field label="Sent through" hint="how the subject was told: email, postal_mail, portal…">
                <input type="text" required maxLength={64} value={draft.channel} onInput={text('channel')} />
              </Field>
              <Field label={`Sent at (${timeZone})`}>
                <input type="datetime-local" required value={draft.at} onInput={text('at')} />
              </Field>
              <Field
                label="Notice reference (optional)"
                hint="your ticket or letter number; no e-mail address or link"
              >
                <input type="text" maxLength={128} value={draft.reference} onInput={text('reference')} />
              </Field>
            </>
          ) : null}
          {action === 'package' ? (
            <>
              <Field label="Link valid for (minutes)">
                <input
                  type="number"
                  required
                  min="1"
                  max="60"
                  value={draft.minutes}
                  onInput={text('minutes')}
                />
              </Field>
              <label class="check">
                <input
                  type="checkbox"
                  checked={draft.raw}
                  onChange={(event) => setDraft({ ...draft, raw: event.currentTarget.checked })}
                />{' '}
                The platform's raw archive instead of the subject's package
              </label>
            </>
          ) : null}
          {action === 'notice' ? null : (
            <Field
              label={needsReason ? 'Reason' : 'Reason (optional)'}
              hint="kept in the audit record: no e-mail address or link"
            >
              <textarea
                required={needsReason}
                maxLength={256}
                rows={2}
                value={draft.reason}
                onInput={text('reason')}
              />
            </Field>
          )}
          <div class="buttons">
            <button type="submit">Review</button>
            <button type="button" class="secondary" onClick={onClose}>
              Close
            </button>
          </div>
        </form>
      ) : (
        <fieldset class="confirm">
          <legend>Confirm</legend>
          <p class="consequence">{consequence(action, request, draft, timeZone)}</p>
          <div class="buttons">
            <button type="button" disabled={stage === 'sending'} onClick={() => void send()}>
              {stage === 'sending' ? 'Sending…' : `Confirm: ${LABELS[action].toLowerCase()}`}
            </button>
            <button
              type="button"
              class="secondary"
              disabled={stage === 'sending'}
              onClick={() => setStage('edit')}
            >
              Back
            </button>
          </div>
        </fieldset>
      )}
    </section>
  );
}

export function Actions({
  request,
  api,
  onChanged,
}: {
  readonly request: RequestDetail;
  readonly api: Api;
  readonly onChanged: (message: ComponentChildren) => void;
}) {
  const [open, setOpen] = useState<ActionName | undefined>();
  return (
    <section aria-labelledby="actions-title">
      <h2 id="actions-title">Actions</h2>
      <div class="buttons">
        {actionsFor(request).map((action) => (
          <button
            type="button"
            class={open === action ? 'pressed' : 'secondary'}
            aria-expanded={open === action}
            onClick={() => setOpen(open === action ? undefined : action)}
          >
            {LABELS[action]}…
          </button>
        ))}
      </div>
      {open === undefined ? null : (
        <ActionForm
          key={open}
          action={open}
          request={request}
          api={api}
          onClose={() => setOpen(undefined)}
          onDone={(message) => {
            setOpen(undefined);
            onChanged(message);
          }}
        />
      )}
    </section>
  );
}
