// Headless Debian Chromium through playwright-core (no browser download).
import axe from 'axe-core';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.ISU_WEB_CHROMIUM ?? '/usr/bin/chromium';

/** Flags for this machine's closed network: no background connections, no QUIC. */
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Playwright starts Chromium with a fresh temporary --user-data-dir each time. */
export function launch(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
}

export function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run the browser tests with scripts/web e2e)`);
  return value.replace(/\/+$/, '');
}

/** WCAG 2 A/AA violations of impact serious or critical that axe-core finds on the page. */
export async function accessibilityProblems(page: Page): Promise<string[]> {
  await page.addScriptTag({ content: axe.source });
  const violations = await page.evaluate(async () => {
    const result = await (window as unknown as { axe: typeof axe }).axe.run(document, {
      runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
    });
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact ?? null,
      targets: v.nodes.slice(0, 3).map((node) => node.target.join(' ')),
    }));
  });
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.targets.join(', ')}`);
}
