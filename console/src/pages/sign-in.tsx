/** Sign-in: local mode's one-time code (printed by `svc-dsr local --serve`) traded for a session. */
import { useState } from 'preact/hooks';
import type { ConsoleConfig } from '../../headers.ts';
import { ApiError, keepSession, type Session } from '../api.ts';
import { Field, Problem } from '../parts.tsx';

export function SignInPage({
  config,
  onSignedIn,
}: {
  readonly config: ConsoleConfig;
  readonly onSignedIn: (session: Session) => void;
}) {
  const [code, setCode] = useState('');
  const [username, setUsername] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | undefined>();
  const path = config.sign_in.path;
  return (
    <section aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Sign in</h1>
      <p>
        Use a one-time code that <code>svc-dsr local --serve</code> printed. Each code signs in once.
      </p>
      {error === undefined ? null : <Problem error={error} />}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          setBusy(true);
          setError(undefined);
          fetch(`${config.api_url}${path}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ code: code.trim(), username: username.trim() }),
            credentials: 'omit',
          })
            .then(async (response) => {
              const answer = (await response.json().catch(() => ({}))) as {
                token?: string;
                error?: { code: string; message: string };
              };
              if (!response.ok || answer.token === undefined)
                throw new ApiError(
                  response.status,
                  answer.error?.code ?? 'internal',
                  answer.error?.message ?? 'sign-in failed',
                );
              const session = keepSession(answer.token);
              if (session === undefined) throw new ApiError(0, 'internal', 'the token given does not read');
              onSignedIn(session);
            })
            .catch((caught: unknown) =>
              setError(
                caught instanceof ApiError
                  ? caught
                  : new ApiError(0, 'unreachable', 'the API cannot be reached: is local mode running?'),
              ),
            )
            .finally(() => setBusy(false));
        }}
      >
        <Field label="Your name" hint="letters, digits, '.', '_' or '-': it names you in the audit records">
          <input
            type="text"
            required
            autoComplete="username"
            pattern="[A-Za-z0-9._\-]{1,64}"
            value={username}
            onInput={(e) => setUsername(e.currentTarget.value)}
          />
        </Field>
        <Field label="One-time code">
          <input
            type="password"
            required
            autoComplete="one-time-code"
            value={code}
            onInput={(e) => setCode(e.currentTarget.value)}
          />
        </Field>
        <button type="submit" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </section>
  );
}
