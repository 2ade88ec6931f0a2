// Client-side routes. The server answers each of these paths with index.html.
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { name: 'top' }
  | { name: 'register' }
  | { name: 'isu'; uuid: string }
  | { name: 'conditions'; uuid: string }
  | { name: 'graph'; uuid: string }
  | { name: 'notFound' };

const ISU_ROUTE = /^\/isu\/([^/]+)(?:\/(condition|graph))?\/?$/;

export function matchRoute(pathname: string): Route {
  if (pathname === '/' || pathname === '') return { name: 'top' };
  if (pathname === '/register' || pathname === '/register/') return { name: 'register' };
  const isu = ISU_ROUTE.exec(pathname);
  if (isu) {
    let uuid: string;
    try {
      uuid = decodeURIComponent(isu[1]!);
    } catch {
      return { name: 'notFound' };
    }
    if (isu[2] === 'condition') return { name: 'conditions', uuid };
    if (isu[2] === 'graph') return { name: 'graph', uuid };
    return { name: 'isu', uuid };
  }
  return { name: 'notFound' };
}

export const paths = {
  top: () => '/',
  register: () => '/register',
  isu: (uuid: string) => `/isu/${encodeURIComponent(uuid)}`,
  conditions: (uuid: string) => `/isu/${encodeURIComponent(uuid)}/condition`,
  graph: (uuid: string) => `/isu/${encodeURIComponent(uuid)}/graph`,
};

const CHANGE = 'isu:navigate';

/** Goes to `url` (path + query) without reloading. */
export function navigate(url: string, options: { replace?: boolean } = {}): void {
  if (options.replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  window.dispatchEvent(new Event(CHANGE));
  if (!options.replace) window.scrollTo?.(0, 0);
}

export interface Location {
  pathname: string;
  search: URLSearchParams;
}

function readLocation(): Location {
  return { pathname: window.location.pathname, search: new URLSearchParams(window.location.search) };
}

/** The current path and query; re-renders on navigation and back/forward. */
export function useLocation(): Location {
  const [location, setLocation] = useState(readLocation);
  useEffect(() => {
    const update = () => setLocation(readLocation());
    window.addEventListener('popstate', update);
    window.addEventListener(CHANGE, update);
    return () => {
      window.removeEventListener('popstate', update);
      window.removeEventListener(CHANGE, update);
    };
  }, []);
  return location;
}

/** Whether a click on a link should be left to the browser (new tab, download, ...). */
export function isModifiedClick(event: MouseEvent): boolean {
  return event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey;
}
