// A local source server for launch tests: archives (tar.gz, zip) of small apps that need no package
// registry, and git repositories over smart HTTP through `git http-backend` (CGI).
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export interface SourceServer {
  base: string;
  /** Serves `bytes` at `path`. */
  put(path: string, bytes: Buffer): void;
  /** A git repository at `${base}/git/<name>.git`, one commit (and tag) per tree given. */
  gitRepo(name: string, commits: { tag: string; files: Record<string, string> }[]): string;
  close(): Promise<void>;
}

export function tree(files: Record<string, string | Buffer>): string {
  const dir = mkdtempSync(join(tmpdir(), 'nube-src-'));
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), content);
  }
  return dir;
}

/** A .tar.gz whose entries sit under one top-level directory (as GitHub's archives do). */
export function tarGz(files: Record<string, string | Buffer>): Buffer {
  const dir = tree(Object.fromEntries(Object.entries(files).map(([k, v]) => [`app-main/${k}`, v])));
  const out = execFileSync('tar', ['-czf', '-', '-C', dir, 'app-main']);
  rmSync(dir, { recursive: true, force: true });
  return out;
}

export function zip(files: Record<string, string>): Buffer {
  const dir = tree(files);
  const file = join(dir, '..', `${dir.split('/').pop()}.zip`);
  execFileSync('python3', ['-c', 'import sys,shutil; shutil.make_archive(sys.argv[1][:-4], "zip", sys.argv[2])', file, dir]);
  const bytes = readFileSync(file);
  rmSync(dir, { recursive: true, force: true });
  rmSync(file, { force: true });
  return bytes;
}

/** A pure-Python wheel of one module (`<name>/__init__.py` holding `code`), installable with no index. */
export function wheel(name: string, version: string, code: string): { file: string; bytes: Buffer } {
  const file = `${name}-${version}-py3-none-any.whl`;
  const info = `${name}-${version}.dist-info`;
  const entries: Record<string, string> = {
    [`${name}/__init__.py`]: code,
    [`${info}/METADATA`]: `Metadata-Version: 2.1\nName: ${name}\nVersion: ${version}\n`,
    [`${info}/WHEEL`]: 'Wheel-Version: 1.0\nGenerator: nube-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
  };
  entries[`${info}/RECORD`] = `${[...Object.keys(entries), `${info}/RECORD`].map((f) => `${f},,`).join('\n')}\n`;
  const script = 'import sys,json,zipfile,io\nb=io.BytesIO()\nz=zipfile.ZipFile(b,"w")\nfor k,v in json.load(sys.stdin).items(): z.writestr(k,v)\nz.close()\nsys.stdout.buffer.write(b.getvalue())';
  return { file, bytes: execFileSync('python3', ['-c', script], { input: JSON.stringify(entries) }) };
}

export async function startSourceServer(): Promise<SourceServer> {
  const files = new Map<string, Buffer>();
  const gitRoot = mkdtempSync(join(tmpdir(), 'nube-git-'));
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname.startsWith('/git/')) {
      const child = spawn('git', ['http-backend'], {
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          GIT_PROJECT_ROOT: gitRoot,
          GIT_HTTP_EXPORT_ALL: '1',
          PATH_INFO: url.pathname.slice(4),
          QUERY_STRING: url.search.slice(1),
          REQUEST_METHOD: req.method ?? 'GET',
          CONTENT_TYPE: req.headers['content-type'] ?? '',
          REMOTE_ADDR: '127.0.0.1',
        },
      });
      req.pipe(child.stdin);
      const out: Buffer[] = [];
      child.stdout.on('data', (c: Buffer) => out.push(c));
      child.on('close', () => {
        const all = Buffer.concat(out);
        const split = all.indexOf('\r\n\r\n');
        const head = all.subarray(0, split).toString('latin1');
        let status = 200;
        for (const line of head.split('\r\n')) {
          const [k, ...v] = line.split(':');
          if (!k) continue;
          if (k.toLowerCase() === 'status') status = Number.parseInt(v.join(':').trim(), 10);
          else res.setHeader(k, v.join(':').trim());
        }
        res.statusCode = status;
        res.end(all.subarray(split + 4));
      });
      return;
    }
    const body = files.get(url.pathname);
    if (!body) {
      res.statusCode = 404;
      res.end('not found');
      return;
    }
    res.setHeader('content-type', 'application/octet-stream');
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    put: (path, bytes) => files.set(path, bytes),
    gitRepo(name, commits) {
      const work = mkdtempSync(join(tmpdir(), 'nube-gitwork-'));
      const git = (...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args], { cwd: work });
      git('init', '-q');
      for (const c of commits) {
        for (const [f, content] of Object.entries(c.files)) {
          mkdirSync(dirname(join(work, f)), { recursive: true });
          writeFileSync(join(work, f), content);
        }
        git('add', '-A');
        git('commit', '-q', '-m', c.tag);
        git('tag', c.tag);
      }
      execFileSync('git', ['clone', '-q', '--bare', work, join(gitRoot, `${name}.git`)]);
      rmSync(work, { recursive: true, force: true });
      return `${base}/git/${name}.git`;
    },
    async close() {
      await new Promise<void>((r) => server.close(() => r()));
      rmSync(gitRoot, { recursive: true, force: true });
    },
  };
}
