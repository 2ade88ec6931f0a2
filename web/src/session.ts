// Who is signed in, shared by every page.
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';

export interface Session {
  /** JIA user id; null when signed out, undefined while still being checked. */
  user: string | null | undefined;
  signOut: () => Promise<void>;
}

export const SessionContext = createContext<Session>({ user: undefined, signOut: async () => {} });

export const useSession = () => useContext(SessionContext);

/** Overridable at build time with VITE_JIA_URL (e.g. http://127.0.0.2:5000). */
export function jiaBaseUrl(): string {
  const configured = import.meta.env.VITE_JIA_URL as string | undefined;
  if (configured) return configured.replace(/\/+$/, '');
  return `${window.location.protocol}//${window.location.hostname}:5000`;
}

/** JIA's sign-in page; JIA sends the browser back to `returnPath` with `?jwt=...`. */
export function signInUrl(returnPath = '/'): string {
  const redirect = new URL(returnPath, window.location.origin).href;
  return `${jiaBaseUrl()}/?redirect=${encodeURIComponent(redirect)}`;
}

/** The URL without its `jwt` parameter (so a reload or a shared link never carries the token). */
export function withoutJwt(pathname: string, search: string): string {
  const params = new URLSearchParams(search);
  params.delete('jwt');
  const rest = params.toString();
  return rest ? `${pathname}?${rest}` : pathname;
}
