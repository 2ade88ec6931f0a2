// Data loading and live refresh.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

export type Loadable<T> =
  | { state: 'loading' }
  | { state: 'ready'; value: T }
  | { state: 'failed'; error: unknown };

/**
 * Runs `load` now and again every `intervalMs` while the page is visible (a
 * hidden tab does not poll; it reloads as soon as it is shown again). A newer
 * answer always wins over an older one. `intervalMs` null = load once.
 */
export function usePolling<T>(
  load: () => Promise<T>,
  deps: readonly unknown[],
  intervalMs: number | null,
): { data: Loadable<T>; reload: () => void } {
  // Answers are kept with the deps they were loaded for, so a page never shows
  // data of the previous ISU, filter or day, not even for one frame.
  const key = JSON.stringify(deps);
  const [loaded, setLoaded] = useState<{ key: string; data: Loadable<T> } | null>(null);
  const generation = useRef(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const keyRef = useRef(key);
  keyRef.current = key;

  const run = useCallback(() => {
    const mine = ++generation.current;
    const forKey = keyRef.current;
    loadRef.current().then(
      (value) => {
        if (mine === generation.current) setLoaded({ key: forKey, data: { state: 'ready', value } });
      },
      (error: unknown) => {
        if (mine === generation.current) setLoaded({ key: forKey, data: { state: 'failed', error } });
      },
    );
  }, []);

  useEffect(() => {
    run();
    if (intervalMs === null) return () => void ++generation.current;
    let timer: ReturnType<typeof setInterval> | undefined;
    const start = () => {
      if (timer === undefined) timer = setInterval(run, intervalMs);
    };
    const stop = () => {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    };
    const onVisibility = () => {
      if (document.visibilityState === 'hidden') {
        stop();
      } else {
        run();
        start();
      }
    };
    if (document.visibilityState !== 'hidden') start();
    document.addEventListener('visibilitychange', onVisibility);
    return () => {
      stop();
      document.removeEventListener('visibilitychange', onVisibility);
      ++generation.current;
    };
  }, [key, intervalMs, run]);

  const data: Loadable<T> = loaded !== null && loaded.key === key ? loaded.data : { state: 'loading' };
  return { data, reload: run };
}

/** Sets the document title while a page is shown. */
export function useTitle(title: string): void {
  useEffect(() => {
    document.title = title ? `${title} · ISUCONDITION` : 'ISUCONDITION';
  }, [title]);
}
