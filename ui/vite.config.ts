import { defineConfig } from "vitest/config";

// The engine serves dist/ at `/` with a strict CSP (script-src 'self', no inline code), so the
// build must not inline scripts; Vite does not. JSX is compiled by esbuild for Preact.
export default defineConfig({
  base: "/",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    // Small icons as files, not data: URLs, so img-src stays 'self'.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    chunkSizeWarningLimit: 300,
  },
  test: {
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
