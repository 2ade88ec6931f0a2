// Components in a DOM (happy-dom) with a fake API behind fetch.
import { act, cleanup, fireEvent, render, screen, waitFor } from '@testing-library/preact';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { IsuWithLatest, TrendEntry } from './api';
import { App } from './app';
import { IsuList } from './components/IsuList';
import { TrendChart } from './components/TrendView';
import { usePolling } from './hooks';
import { summarizeTrend } from './trend';

type Handler = (request: { method: string; url: URL; headers: Headers; body: BodyInit | null | undefined }) => Response;

function fakeApi(handler: Handler) {
  const calls: { method: string; path: string; headers: Headers; body: BodyInit | null | undefined }[] = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (input: RequestInfo | URL, init: RequestInit = {}) => {
      const url = new URL(String(input), window.location.origin);
      const method = init.method ?? 'GET';
      const headers = new Headers(init.headers);
      calls.push({ method, path: url.pathname + url.search, headers, body: init.body });
      return handler({ method, url, headers, body: init.body });
    }),
  );
  return calls;
}

const json = (value: unknown, status = 200) =>
  new Response(JSON.stringify(value), { status, headers: { 'Content-Type': 'application/json' } });
const text = (body: string, status: number) => new Response(body, { status, headers: { 'Content-Type': 'text/plain' } });

const UUID = '0694e4d7-dfce-4aec-b7ca-887ac42cfb8f';
const ISU: IsuWithLatest = {
  id: 7,
  jia_isu_uuid: UUID,
  name: 'いす１',
  character: 'ようき',
  latest_isu_condition: {
    jia_isu_uuid: UUID,
    isu_name: 'いす１',
    timestamp: 1628348400,
    is_sitting: true,
    condition: 'is_dirty=true,is_overweight=false,is_broken=false',
    condition_level: 'warning',
    message: 'ちょっと汚れてる',
  },
};

beforeEach(() => {
  history.replaceState(null, '', '/');
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

describe('TrendChart', () => {
  it('draws one bar per character with its counts in words', () => {
    const trend: TrendEntry[] = [
      {
        character: 'ようき',
        info: [{ isu_id: 1, timestamp: 10 }],
        warning: [],
        critical: [
          { isu_id: 2, timestamp: 9 },
          { isu_id: 3, timestamp: 8 },
        ],
      },
    ];
    render(<TrendChart summary={summarizeTrend(trend)} />);
    expect(screen.getAllByRole('img')).toHaveLength(25);
    expect(screen.getByRole('img', { name: 'ようき: 1 info, 0 warning, 2 critical' })).toBeTruthy();
    expect(screen.getByTestId('total-critical').textContent).toBe('2');
    const bars = document.querySelectorAll<HTMLElement>('[data-character="ようき"] .bar');
    // Scaled to the busiest character (3 ISUs): 1 info = a third, 2 critical = two thirds.
    expect([...bars].map((bar) => bar.className)).toEqual(['bar bar-info', 'bar bar-critical']);
    expect(parseFloat(bars[0]!.style.width)).toBeCloseTo(100 / 3);
    expect(parseFloat(bars[1]!.style.width)).toBeCloseTo(200 / 3);
  });
});

describe('IsuList', () => {
  it('shows each ISU with icon, name, character and latest condition', () => {
    render(<IsuList isus={[ISU]} />);
    expect(screen.getByRole('link', { name: 'いす１' }).getAttribute('href')).toBe(`/isu/${UUID}`);
    expect(screen.getByText('ようき')).toBeTruthy();
    expect(screen.getByText('Warning')).toBeTruthy();
    expect(screen.getByText('dirty, sitting')).toBeTruthy();
    expect(document.querySelector('img.isu-icon')!.getAttribute('src')).toBe(`/api/isu/${UUID}/icon`);
  });

  it('says so when there is no ISU and where to register one', () => {
    render(<IsuList isus={[]} />);
    expect(screen.getByText('You have no ISUs yet.')).toBeTruthy();
    expect(screen.getByRole('link', { name: 'register an ISU' }).getAttribute('href')).toBe('/register');
  });
});

describe('App', () => {
  it('signs in with the ?jwt= from JIA, removes it from the address and shows the user ISUs', async () => {
    history.replaceState(null, '', '/?jwt=token-123');
    let signedIn = false;
    const calls = fakeApi(({ method, url, headers }) => {
      if (method === 'POST' && url.pathname === '/api/auth') {
        signedIn = headers.get('Authorization') === 'Bearer token-123';
        return new Response(null, { status: 200 });
      }
      if (url.pathname === '/api/user/me') return signedIn ? json({ jia_user_id: 'isucon1' }) : text('you are not signed in', 401);
      if (url.pathname === '/api/isu') return json([ISU]);
      if (url.pathname === '/api/trend') return json([]);
      return text('not found', 404);
    });
    render(<App />);
    await screen.findByRole('heading', { name: 'Your ISUs' });
    expect(await screen.findByRole('link', { name: 'いす１' })).toBeTruthy();
    expect(screen.getByLabelText('Signed in as').textContent).toBe('isucon1');
    expect(window.location.search).toBe('');
    const order = calls.map((call) => `${call.method} ${call.path}`);
    expect(order.indexOf('POST /api/auth')).toBeGreaterThanOrEqual(0);
    expect(order.indexOf('POST /api/auth')).toBeLessThan(order.indexOf('GET /api/user/me'));
  });

  it('explains a refused sign-in and offers the JIA button again', async () => {
    history.replaceState(null, '', '/?jwt=expired');
    fakeApi(({ url }) => {
      if (url.pathname === '/api/auth') return text('forbidden', 403);
      if (url.pathname === '/api/trend') return json([]);
      return text('you are not signed in', 401);
    });
    render(<App />);
    expect((await screen.findByRole('alert')).textContent).toMatch(/refused or has expired/);
    expect(screen.getAllByRole('link', { name: 'Sign in with JIA' }).length).toBeGreaterThan(0);
  });

  it('shows registration errors in words and stays on the form', async () => {
    history.replaceState(null, '', '/register');
    fakeApi(({ method, url }) => {
      if (url.pathname === '/api/user/me') return json({ jia_user_id: 'isucon1' });
      if (method === 'POST' && url.pathname === '/api/isu') return text('duplicated: isu', 409);
      return json([]);
    });
    render(<App />);
    fireEvent.input(await screen.findByLabelText('JIA ISU ID'), { target: { value: UUID } });
    fireEvent.input(screen.getByLabelText('Name'), { target: { value: 'いす' } });
    fireEvent.click(screen.getByRole('button', { name: 'Register' }));
    expect((await screen.findByRole('alert')).textContent).toMatch(/already registered/);
    expect(window.location.pathname).toBe('/register');
  });

  it('registers with the multipart fields the API reads, then opens the new ISU', async () => {
    history.replaceState(null, '', '/register');
    let sent: FormData | null = null;
    fakeApi(({ method, url, body }) => {
      if (url.pathname === '/api/user/me') return json({ jia_user_id: 'isucon1' });
      if (method === 'POST' && url.pathname === '/api/isu') {
        sent = body as FormData;
        return json({ id: 7, jia_isu_uuid: UUID, name: 'いす', character: 'ようき' }, 201);
      }
      if (url.pathname === `/api/isu/${UUID}`) return json(ISU);
      return json([]);
    });
    render(<App />);
    const icon = new File([new Uint8Array([0xff, 0xd8, 0xff])], 'me.jpg', { type: 'image/jpeg' });
    fireEvent.input(await screen.findByLabelText('JIA ISU ID'), { target: { value: ` ${UUID} ` } });
    fireEvent.input(screen.getByLabelText('Name'), { target: { value: 'いす' } });
    fireEvent.change(screen.getByLabelText('Icon (optional)'), { target: { files: [icon] } });
    fireEvent.click(screen.getByRole('button', { name: 'Register' }));
    await waitFor(() => expect(window.location.pathname).toBe(`/isu/${UUID}`));
    const form = sent as FormData | null;
    expect(form?.get('jia_isu_uuid')).toBe(UUID);
    expect(form?.get('isu_name')).toBe('いす');
    expect((form?.get('image') as File).name).toBe('me.jpg');
  });

  it('goes back to sign-in when the session has ended (401)', async () => {
    history.replaceState(null, '', `/isu/${UUID}`);
    let me = 0;
    fakeApi(({ url }) => {
      if (url.pathname === '/api/user/me') return ++me === 1 ? json({ jia_user_id: 'isucon1' }) : text('', 401);
      if (url.pathname === '/api/trend') return json([]);
      return text('you are not signed in', 401);
    });
    render(<App />);
    expect(await screen.findByText('Your session has ended. Please sign in again.')).toBeTruthy();
    expect(window.location.pathname).toBe('/');
    expect(screen.getAllByRole('link', { name: 'Sign in with JIA' }).length).toBeGreaterThan(0);
  });

  it('condition history: asks for the filtered window and pages with end_time = the oldest row', async () => {
    history.replaceState(null, '', `/isu/${UUID}/condition?level=warning,critical&end=5000`);
    const rows = (from: number) =>
      Array.from({ length: 20 }, (_, i) => ({ ...ISU.latest_isu_condition!, timestamp: from - i * 10 }));
    const calls = fakeApi(({ url }) => {
      if (url.pathname === '/api/user/me') return json({ jia_user_id: 'isucon1' });
      if (url.pathname === `/api/isu/${UUID}`) return json(ISU);
      if (url.pathname === `/api/condition/${UUID}`) return json(rows(Number(url.searchParams.get('end_time')) - 1));
      return text('', 404);
    });
    render(<App />);
    await waitFor(() => expect(document.querySelectorAll('table.conditions tbody tr')).toHaveLength(20));
    const conditionCalls = () => calls.filter((c) => c.path.startsWith('/api/condition/')).map((c) => c.path);
    expect(conditionCalls()).toEqual([`/api/condition/${UUID}?end_time=5000&condition_level=warning%2Ccritical`]);
    expect((screen.getByRole('checkbox', { name: 'Info' }) as HTMLInputElement).checked).toBe(false);
    fireEvent.click(screen.getByRole('button', { name: 'Older' }));
    await waitFor(() =>
      expect(conditionCalls().at(-1)).toBe(`/api/condition/${UUID}?end_time=4809&condition_level=warning%2Ccritical`),
    );
    expect(window.location.search).toBe('?level=warning%2Ccritical&end=4809');
  });

  it('says an ISU that is missing or not yours is not found', async () => {
    history.replaceState(null, '', `/isu/${UUID}/graph`);
    fakeApi(({ url }) => {
      if (url.pathname === '/api/user/me') return json({ jia_user_id: 'isucon1' });
      return text('not found: isu', 404);
    });
    render(<App />);
    expect(await screen.findByText('ISU not found')).toBeTruthy();
  });

  it('shows the not-found page for unknown paths', () => {
    history.replaceState(null, '', '/no/such/page');
    fakeApi(() => text('', 401));
    render(<App />);
    expect(screen.getByRole('heading', { name: 'Page not found' })).toBeTruthy();
  });
});

describe('usePolling', () => {
  function Poller({ load }: { load: () => Promise<number> }) {
    const { data } = usePolling(load, [], 1000);
    return <p>{data.state === 'ready' ? `value ${data.value}` : data.state}</p>;
  }

  it('refreshes on its interval, pauses while the tab is hidden and catches up when shown', async () => {
    vi.useFakeTimers();
    let visibility: DocumentVisibilityState = 'visible';
    vi.spyOn(document, 'visibilityState', 'get').mockImplementation(() => visibility);
    let n = 0;
    const load = vi.fn(async () => ++n);
    render(<Poller load={load} />);
    await act(async () => {
      await vi.advanceTimersByTimeAsync(2000);
    });
    expect(load).toHaveBeenCalledTimes(3);
    expect(screen.getByText('value 3')).toBeTruthy();

    visibility = 'hidden';
    document.dispatchEvent(new Event('visibilitychange'));
    await act(async () => {
      await vi.advanceTimersByTimeAsync(10_000);
    });
    expect(load).toHaveBeenCalledTimes(3);

    visibility = 'visible';
    document.dispatchEvent(new Event('visibilitychange'));
    await act(async () => {
      await vi.advanceTimersByTimeAsync(0);
    });
    expect(load).toHaveBeenCalledTimes(4);
    await waitFor(() => expect(screen.getByText('value 4')).toBeTruthy());
  });

  it('never shows the answer for the previous ISU or filter while the new one loads', async () => {
    function Keyed({ id }: { id: string }) {
      const { data } = usePolling(() => (id === 'a' ? Promise.resolve('answer a') : new Promise<string>(() => {})), [id], null);
      return <p>{data.state === 'ready' ? data.value : data.state}</p>;
    }
    const { rerender } = render(<Keyed id="a" />);
    expect(await screen.findByText('answer a')).toBeTruthy();
    rerender(<Keyed id="b" />);
    expect(screen.queryByText('answer a')).toBeNull();
    expect(screen.getByText('loading')).toBeTruthy();
  });
});
