// The console's built files (console/dist, made by `npm run build` or on demand by the tests), served
// from memory with the gzip and brotli copies the build wrote beside them. Read at first request, so a
// build made after nube started is picked up (and again when index.html changes).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** console/dist beside the package.json above this module (src/areas/console, or dist/src/areas/console when built). */
function consoleDist(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'console', 'dist');
}

export const CONSOLE_DIST = consoleDist();

export interface StaticFile {
  body: Buffer;
  gzip?: Buffer;
  br?: Buffer;
  type: string;
  immutable: boolean;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
};

export class ConsoleFiles {
  private files: Map<string, StaticFile> | null = null;
  private stamp = 0;

  constructor(private readonly root = CONSOLE_DIST) {}

  /** The file at `rel` ('' or an app route: index.html), or null; undefined when the console is not built. */
  get(rel: string): StaticFile | null | undefined {
    const files = this.load();
    if (!files) return undefined;
    const hit = files.get(rel);
    if (hit) return hit;
    // Assets that are missing are 404s; any other path is a page of the app.
    if (rel.startsWith('assets/') || /\.[a-z0-9]+$/i.test(rel)) return null;
    return files.get('index.html') ?? null;
  }

  private load(): Map<string, StaticFile> | null {
    const index = join(this.root, 'index.html');
    if (!existsSync(index)) return null;
    const stamp = statSync(index).mtimeMs;
    if (this.files && stamp === this.stamp) return this.files;
    const files = new Map<string, StaticFile>();
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const full = join(dir, e.name);
        if (e.isDirectory()) walk(full);
        else if (!/\.(gz|br)$/.test(e.name)) {
          const rel = relative(this.root, full).split('\\').join('/');
          const ext = /\.[a-z0-9]+$/i.exec(e.name)?.[0] ?? '';
          const side = (suffix: string) => (existsSync(full + suffix) ? readFileSync(full + suffix) : undefined);
          files.set(rel, { body: readFileSync(full), gzip: side('.gz'), br: side('.br'), type: TYPES[ext] ?? 'application/octet-stream', immutable: rel.startsWith('assets/') });
        }
      }
    };
    walk(this.root);
    this.files = files;
    this.stamp = stamp;
    return files;
  }
}
