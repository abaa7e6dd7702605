/**
 * New request: one by form, or a CSV/JSONL/JSON file judged line by line (the API's dry run)
 * before anything is sent: the rules of `svc-dsr submit`, applied by the API itself.
 */
import { useState } from 'preact/hooks';
import { CORRECTABLE_FIELDS, REQUEST_CHANNELS } from '../../../lambdas/shared/vocabulary.ts';
import type { Api, ApiError } from '../api.ts';
import { asApiError, Field, Problem } from '../parts.tsx';
import { instantInZone, wallClockNow } from '../time.ts';
import { REGULATIONS, type SubmitAnswer, TYPES } from '../types.ts';

interface OneDraft {
  request_id: string;
  type: string;
  regulation: string;
  primary_key: string;
  received_at: string;
  method: string;
  verified_by: string;
  verified_at: string;
  reference: string;
  channel: string;
  corrections: Record<string, string>;
}

function freshDraft(timeZone: string, verifiedBy: string): OneDraft {
  const now = wallClockNow(timeZone);
  return {
    request_id: crypto.randomUUID(),
    type: 'access',
    regulation: 'gdpr',
    primary_key: '',
    received_at: now,
    method: 'email_link',
    verified_by: verifiedBy,
    verified_at: now,
    reference: '',
    channel: 'web_form',
    corrections: {},
  };
}

/** The request a draft makes; its request_id is fixed when the form opens, so sending it twice sends one request. */
function requestOf(draft: OneDraft, timeZone: string): Record<string, unknown> {
  const corrections = Object.fromEntries(
    Object.entries(draft.corrections).filter(([, value]) => value !== ''),
  );
  return {
    request_id: draft.request_id,
    type: draft.type,
    regulation: draft.regulation,
    primary_key: draft.primary_key,
    received_at: instantInZone(draft.received_at, timeZone) ?? draft.received_at,
    verification: {
      method: draft.method,
      verified_by: draft.verified_by,
      verified_at: instantInZone(draft.verified_at, timeZone) ?? draft.verified_at,
    },
    ...(draft.reference.trim() === '' ? {} : { reference: draft.reference.trim() }),
    ...(draft.channel === '' ? {} : { channel: draft.channel }),
    ...(draft.type === 'correction' ? { corrections } : {}),
  };
}

function OneRequest({ api, username }: { readonly api: Api; readonly username: string }) {
  const timeZone = api.config.time_zone;
  const [draft, setDraft] = useState(() => freshDraft(timeZone, username));
  const [sending, setSending] = useState(false);
  const [error, setError] = useState<ApiError | undefined>();
  const [sent, setSent] = useState<string | undefined>();
  const text = (name: keyof OneDraft) => (event: Event) =>
    setDraft({ ...draft, [name]: (event.currentTarget as HTMLInputElement).value });
  return (
    <section aria-labelledby="one-title">
      <h2 id="one-title">One request</h2>
      {sent === undefined ? null : (
        <p class="done" role="status">
          Sent: request <a href={`#/requests/${sent}`}>{sent.slice(0, 8)}</a> is on the intake queue.
        </p>
      )}
      {error === undefined ? null : <Problem error={error} />}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          setSending(true);
          setError(undefined);
          api
            .post<SubmitAnswer>('/requests', requestOf(draft, timeZone))
            .then(
              () => {
                setSent(draft.request_id);
                setDraft(freshDraft(timeZone, username));
              },
              (caught: unknown) => setError(asApiError(caught)),
            )
            .finally(() => setSending(false));
        }}
      >
        <Field label="Type">
          <select value={draft.type} onChange={text('type')}>
            {TYPES.map((type) => (
              <option value={type}>{type}</option>
            ))}
          </select>
        </Field>
        <Field label="Regulation">
          <select value={draft.regulation} onChange={text('regulation')}>
            {REGULATIONS.map((regulation) => (
              <option value={regulation}>{regulation.toUpperCase()}</option>
            ))}
          </select>
        </Field>
        <Field label="Subject's primary key" hint="the site's own user key, exactly as the site holds it">
          <input
            type="text"
            required
            maxLength={256}
            autoComplete="off"
            spellcheck={false}
            value={draft.primary_key}
            onInput={text('primary_key')}
          />
        </Field>
        <Field label={`Received at (${timeZone})`}>
          <input type="datetime-local" required value={draft.received_at} onInput={text('received_at')} />
        </Field>
        <Field
          label="How the subject was verified"
          hint="the method's name, e.g. email_link or account_login"
        >
          <input type="text" required maxLength={128} value={draft.method} onInput={text('method')} />
        </Field>
        <Field label="Verified by">
          <input
            type="text"
            required
            maxLength={128}
            value={draft.verified_by}
            onInput={text('verified_by')}
          />
        </Field>
        <Field label={`Verified at (${timeZone})`}>
          <input type="datetime-local" required value={draft.verified_at} onInput={text('verified_at')} />
        </Field>
        <Field label="How the request came in">
          <select value={draft.channel} onChange={text('channel')}>
            {REQUEST_CHANNELS.map((channel) => (
              <option value={channel}>{channel.replace(/_/g, ' ')}</option>
            ))}
          </select>
        </Field>
        <Field label="Reference (optional)" hint="your ticket number">
          <input type="text" maxLength={128} value={draft.reference} onInput={text('reference')} />
        </Field>
        {draft.type === 'correction' ? (
          <fieldset>
            <legend>Corrections: the new value of each field to change</legend>
            {CORRECTABLE_FIELDS.map((field) => (
              <Field label={field.replace(/_/g, ' ')}>
                <input
                  type="text"
                  autoComplete="off"
                  value={draft.corrections[field] ?? ''}
                  onInput={(event) =>
                    setDraft({
                      ...draft,
                      corrections: { ...draft.corrections, [field]: event.currentTarget.value },
                    })
                  }
                />
              </Field>
            ))}
          </fieldset>
        ) : null}
        <button type="submit" disabled={sending}>
          {sending ? 'Sending…' : 'Send the request'}
        </button>
      </form>
    </section>
  );
}

function formatOf(name: string): 'csv' | 'jsonl' | 'json' {
  if (/\.csv$/i.test(name)) return 'csv';
  if (/\.json$/i.test(name)) return 'json';
  return 'jsonl';
}

function Verdicts({ answer }: { readonly answer: SubmitAnswer }) {
  const rows = [
    ...answer.bad_lines.map((bad) => ({
      line: bad.line,
      id: bad.request_id,
      verdict: 'refused',
      detail: bad.errors.join('; '),
    })),
    ...answer.warnings.map((w) => ({
      line: w.line,
      id: w.request_id,
      verdict: 'warning',
      detail: w.message,
    })),
    ...answer.duplicates.map((d) => ({
      line: d.line,
      id: d.request_id,
      verdict: 'duplicate',
      detail: `the same as line ${d.first_line}`,
    })),
    ...answer.already_submitted.map((a) => ({
      line: a.line,
      id: a.request_id,
      verdict: 'already submitted',
      detail: a.status,
    })),
    ...answer.conflicts.map((c) => ({
      line: c.line,
      id: c.request_id,
      verdict: 'conflict',
      detail: `in the ledger (${c.status}) with other content`,
    })),
    ...answer.sent.map((s) => ({ line: s.line, id: s.request_id, verdict: 'sent', detail: '' })),
    ...answer.failed.map((f) => ({ line: f.line, id: f.request_id, verdict: 'not sent', detail: f.message })),
  ].sort((a, b) => a.line - b.line);
  return (
    <>
      <p role="status">
        {answer.lines} line(s): {answer.valid} valid, {answer.bad_lines.length} refused
        {answer.dry_run ? '; nothing sent yet.' : `; ${answer.sent.length} sent.`}
      </p>
      {rows.length === 0 ? null : (
        <div class="scroll">
          <table>
            <caption>Each line's verdict</caption>
            <thead>
              <tr>
                <th scope="col">Line</th>
                <th scope="col">Request</th>
                <th scope="col">Verdict</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr class={row.verdict === 'refused' || row.verdict === 'not sent' ? 'bad' : ''}>
                  <td>{row.line}</td>
                  <td>{row.id ?? '—'}</td>
                  <td>{row.verdict}</td>
                  <td>{row.detail}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function Batch({ api }: { readonly api: Api }) {
  const [file, setFile] = useState<{ name: string; content: string } | undefined>();
  const [checked, setChecked] = useState<SubmitAnswer | undefined>();
  const [sent, setSent] = useState<SubmitAnswer | undefined>();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | undefined>();
  const judge = async (dryRun: boolean) => {
    if (file === undefined) return;
    setBusy(true);
    setError(undefined);
    try {
      const answer = await api.post<SubmitAnswer>('/requests/batch', {
        format: formatOf(file.name),
        content: file.content,
        dry_run: dryRun,
      });
      if (dryRun) setChecked(answer);
      else setSent(answer);
    } catch (caught) {
      setError(asApiError(caught));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section aria-labelledby="batch-title">
      <h2 id="batch-title">A batch from a file</h2>
      <p>A CSV, JSONL or JSON file, judged line by line before anything is sent.</p>
      {error === undefined ? null : <Problem error={error} />}
      <Field label="File (.csv, .jsonl or .json)">
        <input
          type="file"
          accept=".csv,.jsonl,.json,text/csv,application/json"
          onChange={(event) => {
            const chosen = event.currentTarget.files?.[0];
            setChecked(undefined);
            setSent(undefined);
            if (chosen === undefined) setFile(undefined);
            else void chosen.text().then((content) => setFile({ name: chosen.name, content }));
          }}
        />
      </Field>
      <div class="buttons">
        <button type="button" disabled={file === undefined || busy} onClick={() => void judge(true)}>
          Check every line
        </button>
        {checked === undefined || sent !== undefined ? null : (
          <button type="button" disabled={busy || checked.valid === 0} onClick={() => void judge(false)}>
            Send the {checked.valid} valid line(s)
          </button>
        )}
      </div>
      {sent === undefined ? (
        checked === undefined ? null : (
          <Verdicts answer={checked} />
        )
      ) : (
        <Verdicts answer={sent} />
      )}
    </section>
  );
}

export function NewRequestPage({ api, username }: { readonly api: Api; readonly username: string }) {
  return (
    <section aria-labelledby="new-title">
      <h1 id="new-title">New request</h1>
      <OneRequest api={api} username={username} />
      <Batch api={api} />
    </section>
  );
}
