// The user journey against a real local cluster with the JIA simulator:
// trend, sign-in through JIA, registration (and its errors), conditions
// arriving, filters and paging, the graph, sign-out, not-found.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accessibilityProblems, launch, required } from './browser';

const BASE = required('ISU_WEB_BASE_URL');
const JIA = required('ISU_WEB_JIA_URL');
const SHOTS = process.env.ISU_WEB_SCREENSHOTS ?? join(process.cwd(), 'e2e-screenshots');
const UNKNOWN_TO_JIA = '9e5c1109-beff-4598-b8f1-658d1994d55f';
const USER = `web-e2e-${Date.now().toString(36)}`;
// A 2×2 PNG, so the icon upload carries a real image.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGP4z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg==',
  'base64',
);

let browser: Browser;
let context: BrowserContext;
let page: Page;
let isuUuid = '';
const pageErrors: string[] = [];

const a11yProblems: string[] = [];

/** Saves a screenshot and notes what axe-core finds wrong on the page. */
async function shot(name: string) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  for (const problem of await accessibilityProblems(page)) a11yProblems.push(`${name}: ${problem}`);
}

/** Timestamps of the condition rows shown, in page order. */
async function rowTimestamps(): Promise<number[]> {
  return page.locator('table.conditions tbody tr').evaluateAll((rows) =>
    rows.map((row) => Number((row as HTMLElement).dataset.timestamp)),
  );
}

async function rowLevels(): Promise<string[]> {
  return page
    .locator('table.conditions tbody tr')
    .evaluateAll((rows) => rows.map((row) => (row as HTMLElement).dataset.level ?? ''));
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await launch();
  context = await browser.newContext({ locale: 'en-GB', timezoneId: 'Europe/Berlin', viewport: { width: 1200, height: 900 } });
  page = await context.newPage();
  page.on('pageerror', (error) => pageErrors.push(String(error)));
});

afterAll(async () => {
  await browser?.close();
});

describe('ISUCONDITION in a browser', () => {
  it('top page: the trend of all 25 characters, refreshed live, and a JIA sign-in button', async () => {
    await page.goto(`${BASE}/`);
    await expect.poll(() => page.locator('.trend-row[data-character]').count()).toBe(25);
    const firstRow = await page.locator('.trend-track').first().getAttribute('aria-label');
    expect(firstRow).toMatch(/^いじっぱり: \d+ info, \d+ warning, \d+ critical$/);
    // Live: the page asks for the trend again by itself.
    await page.waitForRequest((request) => request.url().endsWith('/api/trend'), { timeout: 15_000 });
    const signIn = page.getByRole('link', { name: 'Sign in with JIA' }).first();
    expect(await signIn.getAttribute('href')).toBe(`${JIA}/?redirect=${encodeURIComponent(`${BASE}/`)}`);
    await shot('01-top-signed-out');
  });

  it('sign-in: JIA sends the browser back with ?jwt=, the page signs in and shows the user ISUs', async () => {
    await page.getByRole('link', { name: 'Sign in with JIA' }).first().click();
    await page.waitForURL((url) => url.href.startsWith(`${JIA}/`));
    isuUuid = (await page.locator('li code').first().textContent())!.trim();
    expect(isuUuid).toMatch(/^[0-9a-f-]{36}$/);
    await page.getByLabel('JIA user id').fill(USER);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${BASE}/`); // back, and the token already dropped from the address
    await expect.poll(() => page.getByLabel('Signed in as').textContent()).toBe(USER);
    await page.getByText('You have no ISUs yet.').waitFor();
    await shot('02-signed-in-empty');
  });

  it('register: JIA refusal and a non-image icon are explained in words', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Register' }).click();
    await page.getByLabel('JIA ISU ID').fill(UNKNOWN_TO_JIA);
    await page.getByLabel('Name').fill('unknown to JIA');
    await page.getByRole('button', { name: 'Register' }).click();
    await expect
      .poll(() => page.getByRole('alert').first().textContent())
      .toMatch(/JIA refused the activation: it does not know this JIA ISU ID/);
    await shot('03-register-jia-refused');

    await page.getByLabel('JIA ISU ID').fill(isuUuid);
    await page.getByLabel('Icon (optional)').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hi') });
    await page.getByRole('button', { name: 'Register' }).click();
    await expect.poll(() => page.getByRole('alert').first().textContent()).toMatch(/icon must be an image/);
    expect(new URL(page.url()).pathname).toBe('/register');
  });

  it('register: an ISU with an icon, then the same ISU again is a duplicate', async () => {
    await page.getByLabel('Name').fill('e2e いす');
    await page.getByLabel('Icon (optional)').setInputFiles({ name: 'icon.png', mimeType: 'image/png', buffer: PNG });
    await page.getByRole('img', { name: 'Icon preview' }).waitFor();
    await page.getByRole('button', { name: 'Register' }).click();
    await page.waitForURL(`${BASE}/isu/${isuUuid}`);
    await page.getByRole('heading', { level: 1, name: 'e2e いす' }).waitFor();
    await expect.poll(() => page.title()).toBe('e2e いす · Overview · ISUCONDITION');
    await expect
      .poll(() => page.locator('img.isu-icon-large').evaluate((img) => (img as HTMLImageElement).naturalWidth))
      .toBe(2);
    await shot('04-isu-detail');

    await page.goto(`${BASE}/register`);
    await page.getByLabel('JIA ISU ID').fill(isuUuid);
    await page.getByLabel('Name').fill('again');
    await page.getByRole('button', { name: 'Register' }).click();
    await expect.poll(() => page.getByRole('alert').first().textContent()).toMatch(/already registered/);
    await shot('05-register-duplicate');
  });

  it('ISU list: the new ISU with its icon, character and latest condition', async () => {
    await page.goto(`${BASE}/`);
    const card = page.locator(`.isu-card[data-uuid="${isuUuid}"]`);
    await card.getByRole('link', { name: 'e2e いす' }).waitFor();
    // The list refreshes by itself until the first condition shows.
    await card.locator('.badge').waitFor({ timeout: 60_000 });
    expect(await card.locator('.badge').textContent()).toMatch(/^(Info|Warning|Critical)$/);
    await shot('06-isu-list');
  });

  it('conditions arrive from the JIA simulator, newest first, with paging by end_time', async () => {
    await page.locator(`.isu-card[data-uuid="${isuUuid}"]`).getByRole('link', { name: 'e2e いす' }).click();
    await page.getByRole('navigation', { name: 'ISU pages' }).getByRole('link', { name: 'Condition history' }).click();
    await page.waitForURL(`${BASE}/isu/${isuUuid}/condition`);
    // Wait for a full page (20) so that an older page exists.
    await expect.poll(() => page.locator('table.conditions tbody tr').count(), { timeout: 90_000, interval: 1000 }).toBe(20);
    const first = await rowTimestamps();
    expect(first).toEqual([...first].sort((a, b) => b - a));
    expect(new Set(first).size).toBe(first.length);
    await shot('07-conditions');

    await page.getByRole('button', { name: 'Older' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('end')).toBe(String(first.at(-1)));
    // The older page: every row before the oldest of the first page (end_time is exclusive).
    await expect
      .poll(async () => {
        const older = await rowTimestamps();
        return older.length > 0 && Math.max(...older) < first.at(-1)!;
      })
      .toBe(true);
    await page.getByRole('button', { name: 'Newest' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.has('end')).toBe(false);
  });

  it('conditions: level filter and time range', async () => {
    await page.getByRole('checkbox', { name: 'Info' }).uncheck();
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('level')).toBe('warning,critical');
    // Only warning and critical rows, or the filter's empty state.
    await expect
      .poll(async () => {
        const levels = await rowLevels();
        if (levels.length === 0) return (await page.getByText('No condition matches this filter.').count()) > 0;
        return levels.every((level) => level === 'warning' || level === 'critical');
      })
      .toBe(true);
    await shot('08-conditions-warning-critical');

    // Info only: rows again, every one of them info.
    await page.getByRole('checkbox', { name: 'Info' }).check();
    await page.getByRole('checkbox', { name: 'Warning' }).uncheck();
    await page.getByRole('checkbox', { name: 'Critical' }).uncheck();
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('level')).toBe('info');
    await expect
      .poll(async () => {
        const levels = await rowLevels();
        return levels.length > 0 && levels.every((level) => level === 'info');
      })
      .toBe(true);

    // No level at all is refused in words, without a request.
    await page.getByRole('checkbox', { name: 'Info' }).uncheck();
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect.poll(() => page.getByRole('alert').first().textContent()).toBe('Choose at least one level.');

    // Time range: from the 5th newest condition on, everything shown is at or after it.
    await page.goto(`${BASE}/isu/${isuUuid}/condition`);
    await expect.poll(() => page.locator('table.conditions tbody tr').count()).toBe(20);
    const from = (await rowTimestamps())[4]!;
    await page.getByLabel('From').fill(await page.evaluate((t) => {
      const d = new Date(t * 1000);
      const p = (n: number) => String(n).padStart(2, '0');
      return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
    }, from));
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('start')).toBe(String(from));
    await expect
      .poll(async () => {
        const shown = await rowTimestamps();
        return shown.length >= 5 && Math.min(...shown) >= from;
      })
      .toBe(true);
  });

  it('graph: the day of the latest condition as a chart, previous and next day', async () => {
    await page.getByRole('navigation', { name: 'ISU pages' }).getByRole('link', { name: 'Graph' }).click();
    await page.waitForURL(`${BASE}/isu/${isuUuid}/graph`);
    await page.locator('.chart canvas').waitFor();
    const status = page.getByText(/of 24 hours have conditions/);
    await expect.poll(async () => Number((await status.textContent())!.split(' ')[0])).toBeGreaterThan(0);
    expect(await page.locator('.graph-table tbody tr').count()).toBe(24);
    expect(await page.locator('.graph-table tbody tr[data-has-data="true"]').count()).toBeGreaterThan(0);
    const legend = await page.locator('.u-legend').textContent();
    for (const label of ['Score', 'Sitting %', 'Dirty %', 'Overweight %', 'Broken %']) expect(legend).toContain(label);
    await page.getByText('Hourly figures').click();
    await shot('09-graph');

    const day = Number(await page.locator('#graph-title').getAttribute('data-day'));
    const dayText = await page.locator('#graph-title').textContent();
    await page.getByRole('button', { name: '← Previous day' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('day')).not.toBeNull();
    const previous = Number(new URL(page.url()).searchParams.get('day'));
    expect(day - previous).toBeGreaterThanOrEqual(23 * 3600);
    expect(day - previous).toBeLessThanOrEqual(25 * 3600);
    await expect.poll(() => page.locator('#graph-title').textContent()).not.toBe(dayText);
    await shot('10-graph-previous-day');
    await page.getByRole('button', { name: 'Next day →' }).click();
    await expect.poll(() => page.locator('#graph-title').getAttribute('data-day')).toBe(String(day));
  });

  it('sign-out: back to the sign-in button, the session is gone', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByText('You are signed out.').waitFor();
    await page.getByRole('link', { name: 'Sign in with JIA' }).first().waitFor();
    expect((await context.request.get(`${BASE}/api/user/me`)).status()).toBe(401);
    await shot('11-signed-out');
    await page.goto(`${BASE}/register`);
    await page.getByRole('heading', { name: 'Sign in to continue' }).waitFor();
  });

  it('not-found page for unknown addresses', async () => {
    await page.goto(`${BASE}/no/such/page`);
    await page.getByRole('heading', { name: 'Page not found' }).waitFor();
    await shot('12-not-found');
    expect(pageErrors).toEqual([]);
  });

  it('no serious accessibility problem (axe-core, WCAG 2.1 A/AA) on any page shown above', () => {
    expect(a11yProblems).toEqual([]);
  });
});
