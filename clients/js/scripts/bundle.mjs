// Bundles the compiled modules into one minified ES module,
// dist/groupwire.js: what the relay serves to its demo page
// (GET /groupwire.js; a copy is committed at
// crates/groupwire-relay/assets/groupwire.js) and what a page without a
// bundler can import. esbuild bundles from dist/index.js (tsc's output,
// already type-checked), so the bundle exports exactly what the package
// does. Minified: about half the bytes a browser fetches, and the
// committed copy is a build artifact, not a second copy of the sources
// (dist/*.js and src/ stay readable; dist/groupwire.js.map maps back).
import { readFileSync } from 'node:fs';
import { build } from 'esbuild';

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const banner =
  `// groupwire ${version}: the browser client of the groupwire relay, one ES module.\n` +
  '// Built from clients/js/src by `npm run build` (esbuild, minified); do not edit.';

await build({
  entryPoints: [new URL('../dist/index.js', import.meta.url).pathname],
  outfile: new URL('../dist/groupwire.js', import.meta.url).pathname,
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  minify: true,
  // Class names stay readable in errors (`RelayError`, `ConnectionError`).
  keepNames: true,
  legalComments: 'none',
  // A map beside the bundle in dist/ for debugging; the relay serves the
  // bundle alone, so no sourceMappingURL comment points at a missing file.
  sourcemap: 'external',
  banner: { js: banner },
  logLevel: 'warning',
});
