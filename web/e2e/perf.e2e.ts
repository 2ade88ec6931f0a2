// Time to first render of the top page in headless Chromium: first contentful
// paint, and the moment the trend's 25 bars are in the DOM (the page's own
// user-timing mark), over several cold loads (a new browser context each).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { launch, required } from './browser';

const BASE = required('ISU_WEB_BASE_URL');
const LOADS = Number(process.env.ISU_WEB_PERF_LOADS ?? 7);
const METRICS = process.env.ISU_WEB_METRICS;

let browser: Browser;
beforeAll(async () => {
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
});

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

it(`top page renders quickly (median of ${LOADS} cold loads)`, async () => {
  const fcp: number[] = [];
  const trend: number[] = [];
  const trendRequest: number[] = [];
  const trendResponse: number[] = [];
  for (let i = 0; i < LOADS; i++) {
    const context = await browser.newContext(); // empty cache every time
    const page = await context.newPage();
    await page.goto(`${BASE}/`);
    await page.waitForFunction(() => document.querySelectorAll('.trend-row[data-character]').length === 25);
    // The page marks the moment its trend first rendered (TREND_DRAWN_MARK).
    const trendAt = await page.evaluate(
      () => performance.getEntriesByName('isucondition:trend-drawn')[0]?.startTime ?? Number.NaN,
    );
    const paint = await page.evaluate(
      () => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? Number.NaN,
    );
    const api = await page.evaluate(() => {
      const entry = performance.getEntriesByType('resource').find((e) => e.name.endsWith('/api/trend')) as
        | PerformanceResourceTiming
        | undefined;
      return entry ? [entry.startTime, entry.responseEnd] : [Number.NaN, Number.NaN];
    });
    trendRequest.push(api[0]!);
    trendResponse.push(api[1]!);
    fcp.push(paint);
    trend.push(trendAt);
    await context.close();
  }
  const result = {
    loads: LOADS,
    first_contentful_paint_ms: { median: median(fcp), all: fcp.map(Math.round) },
    trend_rendered_ms: { median: median(trend), all: trend.map(Math.round) },
    trend_request_sent_ms: { median: median(trendRequest) },
    trend_response_done_ms: { median: median(trendResponse) },
  };
  console.log(`time to first render: ${JSON.stringify(result)}`);
  if (METRICS) {
    mkdirSync(dirname(METRICS), { recursive: true });
    writeFileSync(METRICS, `${JSON.stringify(result, null, 2)}\n`);
  }
  expect(fcp.every(Number.isFinite)).toBe(true);
  expect(trend.every(Number.isFinite)).toBe(true);
  expect(result.first_contentful_paint_ms.median).toBeLessThan(3000);
});
