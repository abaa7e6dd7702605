/** The pieces every page uses: a call's state, its error, a deadline's badge, a labelled field. */
import { type ComponentChildren, cloneElement, type VNode } from 'preact';
import { useCallback, useEffect, useId, useState } from 'preact/hooks';
import { ApiError } from './api.ts';
import { daysLeft, daysLeftText, risk } from './time.ts';

/** After this long a call in flight says that it is slow. */
const SLOW_MS = 3000;

export type Loaded<T> =
  | { readonly state: 'loading'; readonly slow: boolean }
  | { readonly state: 'failed'; readonly error: ApiError }
  | { readonly state: 'done'; readonly value: T };

export function asApiError(error: unknown): ApiError {
  return error instanceof ApiError ? error : new ApiError(0, 'internal', String(error));
}

/**
 * Runs `load` whenever `keys` change; `reload` runs it again and keeps what is shown until the new
 * answer comes (a page refreshed in place does not flash or lose an open form).
 */
export function useLoad<T>(load: () => Promise<T>, keys: readonly unknown[]): [Loaded<T>, () => void] {
  const [loaded, setLoaded] = useState<Loaded<T>>({ state: 'loading', slow: false });
  const [round, setRound] = useState(0);
  const keyText = JSON.stringify(keys);
  const [loadedFor, setLoadedFor] = useState(keyText);
  useEffect(() => {
    let live = true;
    const fresh = loadedFor !== keyText;
    if (fresh) setLoadedFor(keyText);
    setLoaded((now) => (fresh || now.state !== 'done' ? { state: 'loading', slow: false } : now));
    const slow = setTimeout(
      () => live && setLoaded((now) => (now.state === 'loading' ? { state: 'loading', slow: true } : now)),
      SLOW_MS,
    );
    load()
      .then(
        (value) => live && setLoaded({ state: 'done', value }),
        (error: unknown) => live && setLoaded({ state: 'failed', error: asApiError(error) }),
      )
      .finally(() => clearTimeout(slow));
    return () => {
      live = false;
      clearTimeout(slow);
    };
  }, [keyText, round]);
  return [loaded, useCallback(() => setRound((n) => n + 1), [])];
}

export function Problem({ error }: { readonly error: ApiError }) {
  return (
    <div class="problem" role="alert">
      <strong>{error.status === 0 ? 'No answer' : `Refused (${error.code})`}:</strong> {error.message}
    </div>
  );
}

export function Waiting({ slow }: { readonly slow: boolean }) {
  return (
    <p class="waiting" role="status">
      {slow ? 'Still waiting for the API… the page keeps what you typed.' : 'Loading…'}
    </p>
  );
}

/** A loaded value shown by `children`, or its waiting or its error. */
export function Show<T>({
  loaded,
  children,
}: {
  readonly loaded: Loaded<T>;
  readonly children: (value: T) => ComponentChildren;
}) {
  if (loaded.state === 'loading') return <Waiting slow={loaded.slow} />;
  if (loaded.state === 'failed') return <Problem error={loaded.error} />;
  return <>{children(loaded.value)}</>;
}

export function DaysLeft({ dueAt, timeZone }: { readonly dueAt: string | null; readonly timeZone: string }) {
  const days = daysLeft(dueAt, timeZone);
  return <span class={`days ${risk(days)}`}>{daysLeftText(days)}</span>;
}

/** A labelled control: the label names it, and its hint is its description (not part of its name). */
export function Field({
  label,
  hint,
  children,
}: {
  readonly label: string;
  readonly hint?: string;
  readonly children: VNode<Record<string, unknown>>;
}) {
  const id = useId();
  const hintId = `${id}-hint`;
  return (
    <div class="field">
      <label class="label" for={id}>
        {label}
      </label>
      {cloneElement(children, { id, ...(hint === undefined ? {} : { 'aria-describedby': hintId }) })}
      {hint === undefined ? null : (
        <span class="hint" id={hintId}>
          {hint}
        </span>
      )}
    </div>
  );
}
