// What the built nube (dist/) was compiled from: a hash of every source file that tsc reads for
// tsconfig.build.json and of the assets copied beside the output. `npm run build` writes it into
// dist/build-info.json; `npm start` and `npm run nube` compare it so they never run stale code silently.
// Contents, not modification times: a git checkout touches mtimes without changing anything.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Files under src/ that end up in dist/: TypeScript (tests excluded) and the assets copied as they are. */
export function sourceFiles(root) {
  const out = [];
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (!e.name.endsWith('.test.ts')) out.push(relative(root, p));
    }
  };
  walk(join(root, 'src'));
  return out.sort();
}

/** Non-TypeScript files that the code reads next to itself at run time (the C sources it compiles). */
export const isAsset = (rel) => !rel.endsWith('.ts');

export function fingerprint(root) {
  const h = createHash('sha256');
  for (const rel of [...sourceFiles(root), 'tsconfig.json', 'tsconfig.build.json']) {
    h.update(rel).update('\0').update(readFileSync(join(root, rel))).update('\0');
  }
  return h.digest('hex');
}

/** The fingerprint dist/ was built from (dist/build-info.json), or undefined when there is no build. */
export function builtFingerprint(root) {
  try {
    return JSON.parse(readFileSync(join(root, 'dist/build-info.json'), 'utf8')).sources;
  } catch {
    return undefined;
  }
}
