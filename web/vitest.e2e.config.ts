// Browser tests: headless Debian Chromium driven by playwright-core against a
// running cluster (scripts/web e2e starts one and sets ISU_WEB_BASE_URL).
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'node',
    include: ['e2e/**/*.e2e.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    sequence: { concurrent: false },
  },
});
