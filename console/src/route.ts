/**
 * The console's address of a page: `#/requests?status=failed`, the page and its filters in the
 * hash, so that a filtered list can be bookmarked and the browser's back button works. A subject
 * identifier is never a parameter: the API takes none in a query, and the page puts none there.
 */
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  /** The path's parts after `#/`: `['requests', '<id>']`. */
  readonly parts: readonly string[];
  readonly params: URLSearchParams;
}

export function parseRoute(hash: string): Route {
  const text = hash.replace(/^#\/?/, '');
  const at = text.indexOf('?');
  const path = at === -1 ? text : text.slice(0, at);
  return {
    parts: path
      .split('/')
      .filter((part) => part !== '')
      .map(decodeURIComponent),
    params: new URLSearchParams(at === -1 ? '' : text.slice(at + 1)),
  };
}

/** The hash of a page and its parameters (empty ones left out). */
export function href(path: string, params?: Readonly<Record<string, string | undefined>>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params ?? {}))
    if (value !== undefined && value !== '') search.set(name, value);
  const text = search.toString();
  return `#/${path}${text === '' ? '' : `?${text}`}`;
}

export function navigate(path: string, params?: Readonly<Record<string, string | undefined>>): void {
  location.hash = href(path, params);
}

/** The current route, following the hash. */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const follow = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', follow);
    return () => removeEventListener('hashchange', follow);
  }, []);
  return route;
}
