// The accessibility check used by app.e2e.ts does find problems (so its empty
// result there means something).
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { accessibilityProblems, launch } from './browser';

let browser: Browser;
beforeAll(async () => {
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
});

it('reports an image without alt text and a nameless button', async () => {
  const page = await browser.newPage();
  await page.setContent('<html lang="en"><title>t</title><main><img src="data:,"><button></button></main></html>');
  const problems = await accessibilityProblems(page);
  expect(problems.some((p) => p.startsWith('image-alt'))).toBe(true);
  expect(problems.some((p) => p.startsWith('button-name'))).toBe(true);
});
