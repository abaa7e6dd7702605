/** The privacy console: sign-in, then the pages, each reached by its address in the hash. */
import { type ComponentChildren, render } from 'preact';
import { useMemo, useState } from 'preact/hooks';
import { CONSOLE_CONFIG_FILE, type ConsoleConfig } from '../headers.ts';
import { Api, endSession, type Session, storedSession } from './api.ts';
import { NewRequestPage } from './pages/new-request.tsx';
import { ReportPage } from './pages/report.tsx';
import { RequestPage } from './pages/request.tsx';
import { RequestsPage } from './pages/requests.tsx';
import { SignInPage } from './pages/sign-in.tsx';
import { TodayPage } from './pages/today.tsx';
import { useRoute } from './route.ts';

/** Whether a role may act (the API decides; the page only leaves out buttons it would refuse). */
export function canAct(session: Session): boolean {
  return session.roles.includes('privacy-team');
}

function App({ config }: { readonly config: ConsoleConfig }) {
  const [session, setSession] = useState<Session | undefined>(() => storedSession());
  const route = useRoute();
  const api = useMemo(
    () =>
      new Api(config, session, () => {
        endSession();
        setSession(undefined);
      }),
    [config, session],
  );
  if (session === undefined) {
    return (
      <main id="main">
        <SignInPage config={config} onSignedIn={setSession} />
      </main>
    );
  }
  const acts = canAct(session);
  const [page, id] = route.parts;
  const links: [string, string][] = [
    ['today', 'Today'],
    ['requests', 'Requests'],
    ...(acts ? ([['new', 'New request']] as [string, string][]) : []),
    ['report', 'Report'],
  ];
  const current = page ?? 'today';
  let body: ComponentChildren;
  if (current === 'requests' && id !== undefined)
    body = <RequestPage key={id} api={api} requestId={id} canAct={acts} />;
  else if (current === 'requests') body = <RequestsPage api={api} route={route} />;
  else if (current === 'new' && acts) body = <NewRequestPage api={api} username={session.username} />;
  else if (current === 'report') body = <ReportPage api={api} route={route} />;
  else body = <TodayPage api={api} />;
  return (
    <>
      <button type="button" class="skip" onClick={() => document.getElementById('main')?.focus()}>
        Skip to the page
      </button>
      <header>
        <span class="brand">svc-dsr privacy console</span>
        <nav aria-label="Pages">
          <ul>
            {links.map(([path, label]) => (
              <li key={path}>
                <a href={`#/${path}`} aria-current={current === path ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <span class="who">
          {session.username} ({session.roles.join(', ') || 'no role'}){' '}
          <button
            type="button"
            class="secondary"
            onClick={() => {
              endSession();
              setSession(undefined);
            }}
          >
            Sign out
          </button>
        </span>
      </header>
      <main id="main" tabIndex={-1}>
        {body}
      </main>
    </>
  );
}

async function start(): Promise<void> {
  const root = document.getElementById('app');
  if (root === null) return;
  try {
    const response = await fetch(CONSOLE_CONFIG_FILE, { cache: 'no-store' });
    const config = (await response.json()) as ConsoleConfig;
    root.replaceChildren();
    render(<App config={config} />, root);
  } catch {
    root.textContent =
      'The console could not read its settings (config.json): reload the page, or ask whoever runs it.';
  }
}

void start();
