// Routes, errors in words, the condition filter, sign-in URLs and form checks.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError, conditionSearch, FAR_FUTURE } from './api';
import { filterSearch, mayHaveOlder, olderPage, parseFilter, toQuery } from './conditionFilter';
import { describeError } from './errors';
import { matchRoute, paths } from './router';
import { signInUrl, withoutJwt } from './session';
import { validateRegistration } from './validate';

const UUID = '0694e4d7-dfce-4aec-b7ca-887ac42cfb8f';

describe('routes', () => {
  it('matches every front-end route the server serves as index.html', () => {
    expect(matchRoute('/')).toEqual({ name: 'top' });
    expect(matchRoute('/register')).toEqual({ name: 'register' });
    expect(matchRoute(`/isu/${UUID}`)).toEqual({ name: 'isu', uuid: UUID });
    expect(matchRoute(`/isu/${UUID}/condition`)).toEqual({ name: 'conditions', uuid: UUID });
    expect(matchRoute(`/isu/${UUID}/graph`)).toEqual({ name: 'graph', uuid: UUID });
  });

  it('sends anything else to the not-found page', () => {
    expect(matchRoute('/isu')).toEqual({ name: 'notFound' });
    expect(matchRoute(`/isu/${UUID}/icon`)).toEqual({ name: 'notFound' });
    expect(matchRoute('/nope')).toEqual({ name: 'notFound' });
    expect(matchRoute('/isu/%E0%A4%A')).toEqual({ name: 'notFound' });
  });

  it('builds paths that match back', () => {
    expect(matchRoute(paths.graph('a b'))).toEqual({ name: 'graph', uuid: 'a b' });
  });
});

describe('API errors in words', () => {
  it('names a duplicate registration', () => {
    expect(describeError(new ApiError(409, 'duplicated: isu'), 'register')).toMatch(/already registered/);
  });
  it('names JIA refusing an unknown ISU, and other JIA refusals', () => {
    expect(describeError(new ApiError(404, 'JIAService returned error'), 'register')).toMatch(
      /JIA refused the activation: it does not know this JIA ISU ID/,
    );
    expect(describeError(new ApiError(400, 'JIAService returned error'), 'register')).toMatch(/JIA answered 400/);
  });
  it('names a bad image', () => {
    expect(describeError(new ApiError(400, 'bad format: icon'), 'register')).toMatch(/icon could not be used/);
    expect(describeError(new ApiError(413, ''), 'register')).toMatch(/icon could not be used/);
  });
  it('names sign-in failures, missing sessions, missing ISUs and server faults', () => {
    expect(describeError(new ApiError(403, 'forbidden'), 'signin')).toMatch(/refused or has expired/);
    expect(describeError(new ApiError(401, 'you are not signed in'))).toMatch(/not signed in/);
    expect(describeError(new ApiError(404, 'not found: isu'))).toMatch(/does not exist, or it is not yours/);
    expect(describeError(new ApiError(502, ''))).toMatch(/server had a problem \(status 502\)/);
    expect(describeError(new TypeError('Failed to fetch'))).toMatch(/Could not reach the server/);
  });
});

describe('condition filter', () => {
  it('defaults to every level and the newest conditions', () => {
    const filter = parseFilter(new URLSearchParams(''));
    expect(filter).toEqual({ levels: ['info', 'warning', 'critical'], start: null, end: null });
    expect(filterSearch(filter)).toBe('');
    expect(toQuery(filter)).toEqual({ levels: ['info', 'warning', 'critical'], endTime: FAR_FUTURE, startTime: undefined });
  });

  it('round-trips through the page URL and ignores unknown levels', () => {
    const filter = parseFilter(new URLSearchParams('level=critical,bogus,warning&start=100&end=200'));
    expect(filter).toEqual({ levels: ['warning', 'critical'], start: 100, end: 200 });
    expect(parseFilter(new URLSearchParams(filterSearch(filter).slice(1)))).toEqual(filter);
  });

  it('pages with end_time = the oldest timestamp shown (exclusive bound)', () => {
    const filter = parseFilter(new URLSearchParams('level=info&start=100'));
    const next = olderPage(filter, 150);
    expect(toQuery(next)).toEqual({ levels: ['info'], endTime: 150, startTime: 100 });
    expect(conditionSearch(toQuery(next))).toBe('end_time=150&condition_level=info&start_time=100');
    expect(mayHaveOlder(20)).toBe(true);
    expect(mayHaveOlder(19)).toBe(false);
  });

  it('sends the level list comma-separated, as the API wants', () => {
    expect(conditionSearch({ endTime: 5, levels: ['warning', 'critical'] })).toBe(
      'end_time=5&condition_level=warning%2Ccritical',
    );
  });
});

describe('sign-in', () => {
  it('sends the browser to JIA on port 5000 of the same host, asking to come back here', () => {
    // happy-dom's default location is http://localhost:3000/
    expect(signInUrl('/')).toBe(`http://localhost:5000/?redirect=${encodeURIComponent('http://localhost:3000/')}`);
    expect(signInUrl('/isu/x/graph?day=1')).toContain(encodeURIComponent('http://localhost:3000/isu/x/graph?day=1'));
  });
  it('uses VITE_JIA_URL when the build sets it', () => {
    vi.stubEnv('VITE_JIA_URL', 'https://jia.example.com/');
    expect(signInUrl('/')).toBe(`https://jia.example.com/?redirect=${encodeURIComponent('http://localhost:3000/')}`);
  });
  afterEach(() => {
    vi.unstubAllEnvs();
  });
  it('drops the token from the address, keeping the rest', () => {
    expect(withoutJwt('/', '?jwt=abc')).toBe('/');
    expect(withoutJwt('/isu/x', '?jwt=abc&day=5')).toBe('/isu/x?day=5');
  });
});

describe('registration form', () => {
  const ok = { uuid: UUID, name: 'いす', icon: null };
  it('accepts an ID, a name and no icon', () => {
    expect(validateRegistration(ok)).toEqual({});
    expect(validateRegistration({ ...ok, icon: { type: 'image/jpeg', size: 1000 } })).toEqual({});
  });
  it('explains each problem', () => {
    expect(validateRegistration({ ...ok, uuid: '' }).uuid).toMatch(/Enter the JIA ISU ID/);
    expect(validateRegistration({ ...ok, uuid: 'abc' }).uuid).toMatch(/looks like/);
    expect(validateRegistration({ ...ok, name: '  ' }).name).toMatch(/name/);
    expect(validateRegistration({ ...ok, icon: { type: 'text/plain', size: 10 } }).icon).toMatch(/must be an image/);
    expect(validateRegistration({ ...ok, icon: { type: 'image/png', size: 11 << 20 } }).icon).toMatch(/10 MB/);
  });
});
