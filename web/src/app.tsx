// The shell: session, header, and the page of the current route.
import { useCallback, useEffect, useMemo, useState } from 'preact/hooks';
import { api, setUnauthorizedHandler } from './api';
import { Link } from './components/Link';
import { ErrorMessage, Loading } from './components/Status';
import { ConditionsPage } from './pages/Conditions';
import { GraphPage } from './pages/Graph';
import { IsuDetailPage } from './pages/IsuDetail';
import { NotFoundPage } from './pages/NotFound';
import { RegisterPage } from './pages/Register';
import { TopPage } from './pages/Top';
import { matchRoute, navigate, paths, useLocation, type Route } from './router';
import { SessionContext, signInUrl, withoutJwt, type Session } from './session';

type Notice = { kind: 'info' | 'error'; text?: string; error?: unknown; context?: 'signin' };

export function App() {
  const location = useLocation();
  const route = matchRoute(location.pathname);
  const [user, setUser] = useState<string | null | undefined>(undefined);
  const [notice, setNotice] = useState<Notice | null>(null);

  useEffect(() => {
    setUnauthorizedHandler(() => {
      setUser(null);
      setNotice({ kind: 'info', text: 'Your session has ended. Please sign in again.' });
      navigate(paths.top());
    });
    void startSession().then(setUser, (error: unknown) => {
      setUser(null);
      setNotice({ kind: 'error', error, context: 'signin' });
    });
  }, []);

  const signOut = useCallback(async () => {
    try {
      await api.signOut();
    } catch {
      // Signed out already (401) or the server is down: either way forget the user here.
    }
    setUser(null);
    setNotice({ kind: 'info', text: 'You are signed out.' });
    navigate(paths.top());
  }, []);

  const session = useMemo<Session>(() => ({ user, signOut }), [user, signOut]);

  return (
    <SessionContext.Provider value={session}>
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <Header />
      <main id="main" class="main">
        {notice && (
          <div class={`notice notice-${notice.kind}`}>
            {notice.error !== undefined ? (
              <ErrorMessage error={notice.error} context={notice.context} />
            ) : (
              <p role="status">{notice.text}</p>
            )}
            <button type="button" class="link-button" onClick={() => setNotice(null)} aria-label="Dismiss">
              ×
            </button>
          </div>
        )}
        <Page route={route} user={user} />
      </main>
    </SessionContext.Provider>
  );
}

/** Signs in with a `?jwt=` from JIA when present, then asks who is signed in. */
async function startSession(): Promise<string | null> {
  const jwt = new URLSearchParams(window.location.search).get('jwt');
  if (jwt) {
    navigate(withoutJwt(window.location.pathname, window.location.search), { replace: true });
    await api.auth(jwt);
  }
  return api.me();
}

function Page({ route, user }: { route: Route; user: string | null | undefined }) {
  if (route.name === 'notFound') return <NotFoundPage />;
  if (route.name === 'top') return <TopPage />;
  if (user === undefined) return <Loading what="your session" />;
  if (user === null) return <SignInNeeded />;
  switch (route.name) {
    case 'register':
      return <RegisterPage />;
    case 'isu':
      return <IsuDetailPage uuid={route.uuid} />;
    case 'conditions':
      return <ConditionsPage uuid={route.uuid} />;
    case 'graph':
      return <GraphPage uuid={route.uuid} />;
  }
}

function SignInNeeded() {
  return (
    <section class="narrow">
      <h1>Sign in to continue</h1>
      <p>This page shows your own ISUs. Sign in with your JIA account to see it.</p>
      <a class="button button-primary" href={signInUrl(window.location.pathname + window.location.search)}>
        Sign in with JIA
      </a>
    </section>
  );
}

function Header() {
  return (
    <SessionContext.Consumer>
      {({ user, signOut }) => (
        <header class="site-header">
          <Link href={paths.top()} class="brand">
            ISUCONDITION
          </Link>
          <nav aria-label="Main">
            {user && (
              <>
                <Link href={paths.top()}>Your ISUs</Link>
                <Link href={paths.register()}>Register</Link>
                <span class="user" aria-label="Signed in as">
                  {user}
                </span>
                <button type="button" class="button button-small" onClick={() => void signOut()}>
                  Sign out
                </button>
              </>
            )}
            {user === null && (
              <a class="button button-small button-primary" href={signInUrl('/')}>
                Sign in with JIA
              </a>
            )}
          </nav>
        </header>
      )}
    </SessionContext.Consumer>
  );
}
