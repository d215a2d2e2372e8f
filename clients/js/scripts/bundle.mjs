// Bundles the compiled modules into one ES module, dist/groupwire.js:
// what the relay serves to its demo page (GET /groupwire.js; a copy is
// committed at crates/groupwire-relay/assets/groupwire.js) and what a page
// without a bundler can import. The modules have no dependencies, so
// bundling is concatenation in dependency order without the imports
// between them; their exports stay exports.
import { readFileSync, writeFileSync } from 'node:fs';

const order = ['frame', 'errors', 'client'];
const local = /^import\s[^;]*?\sfrom\s+'\.\/[a-z]+\.js';\n/gms;
const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
let out = `// groupwire ${version}: the browser client of the groupwire relay, one ES module.\n`;
out += '// Built from clients/js/src by `npm run build`; do not edit.\n';
for (const m of order) {
  const src = readFileSync(new URL(`../dist/${m}.js`, import.meta.url), 'utf8')
    .replace(local, '')
    .replace(/^\/\/# sourceMappingURL=.*\n?/m, '');
  if (/^import\s/m.test(src)) throw new Error(`dist/${m}.js imports something besides the local modules`);
  out += `\n// ---- ${m}.ts\n${src.trimEnd()}\n`;
}
writeFileSync(new URL('../dist/groupwire.js', import.meta.url), out);
