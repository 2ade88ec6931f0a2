/// <reference types="vitest/config" />
// Build, development server and unit-test configuration of the ISUCONDITION front end.
// The build output (dist/index.html + dist/assets/) matches what nginx serves:
// /assets/<file> from STATIC_DIR/assets, every other page path as index.html.
import { defineConfig } from 'vite';

export default defineConfig({
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
  // `npx vite` (development): the API of a running cluster, same origin for the cookie.
  server: {
    proxy: { '/api': { target: process.env.ISU_WEB_API ?? 'http://127.0.0.2:8080', changeOrigin: false } },
  },
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    // Every browser the app targets (ES2022) supports <link rel="modulepreload">.
    modulePreload: { polyfill: false },
  },
  test: {
    environment: 'happy-dom',
    include: ['src/**/*.test.{ts,tsx}'],
  },
});
