// Headless Debian Chromium through playwright-core (no browser download).
import { chromium, type Browser } from 'playwright-core';

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
