// The console's build (scripts/build-console.mjs runs it): Preact through esbuild's JSX, everything
// bundled into console/dist so nube serves it with no outside asset.
import { defineConfig } from 'vite';

export default defineConfig({
  root: import.meta.dirname,
  base: '/console/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', assetsInlineLimit: 0, reportCompressedSize: false },
  logLevel: 'warn',
});
