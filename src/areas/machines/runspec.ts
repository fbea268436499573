// How an app tree runs: a `nube.json` runspec wins, then a Procfile's `web:` line, then detection
// (Node's package.json, a Python app or WSGI/ASGI app object, a static site). The port is the runspec's, else PORT=8080 is
// offered to the app and the first port it listens on is used.
import { z } from 'zod';
import { PythonAppError, pythonStart } from './python-app.js';

export const DEFAULT_PORT = 8080;

export const RunspecFile = z.object({
  start: z.string().min(1).max(4096).optional(),
  build: z.string().min(1).max(4096).optional(),
  port: z.number().int().min(1).max(65535).optional(),
  dataPaths: z.array(z.string().regex(/^\//, 'an absolute path').max(1024)).max(20).optional(),
  health: z.string().regex(/^\//, 'a path such as /health').max(1024).optional(),
});

export interface Runspec {
  start: string;
  build: string | null;
  port: number | null;
  dataPaths: string[];
  health: string | null;
  /** Where the start command came from: nube.json, Procfile, package.json, python, static. */
  detectedFrom: string;
  /** Names of the secrets the app receives (values live sealed in the store). */
  secretNames: string[];
}

/** What detection reads: a file of the app tree, or null when it is absent. */
export type ReadApp = (name: string) => Promise<string | null>;

export class RunspecError extends Error {}

/** What a launch asked for explicitly: it wins over the tree's runspec and detection. */
export interface Overrides {
  start?: string;
  build?: string;
  port?: number;
  env?: Record<string, string>;
}

export async function resolveRunspec(read: ReadApp, over: Overrides = {}): Promise<Omit<Runspec, 'secretNames'>> {
  const r = await resolveTree(read, over);
  return { ...r, port: over.port ?? r.port, build: over.build ?? r.build };
}

async function resolveTree(read: ReadApp, over: Overrides): Promise<Omit<Runspec, 'secretNames'>> {
  const file = await read('nube.json');
  let spec: z.infer<typeof RunspecFile> = {};
  if (file !== null) {
    let raw: unknown;
    try {
      raw = JSON.parse(file);
    } catch {
      throw new RunspecError('nube.json is not valid JSON');
    }
    const r = RunspecFile.safeParse(raw);
    if (!r.success) throw new RunspecError(`nube.json: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    spec = r.data;
  }
  const base = { port: spec.port ?? null, dataPaths: spec.dataPaths ?? [], health: spec.health ?? null };
  if (over.start) return { ...base, start: over.start, build: spec.build ?? (await detect(read))?.build ?? null, detectedFrom: 'launch' };
  if (spec.start) return { ...base, start: spec.start, build: spec.build ?? null, detectedFrom: 'nube.json' };
  const detected = await detect(read);
  if (!detected) {
    throw new RunspecError('no start command: add nube.json {"start": ...}, a Procfile web: line, a package.json, a Python app or an index.html');
  }
  return { ...base, ...detected, build: spec.build ?? detected.build };
}

async function detect(read: ReadApp): Promise<{ start: string; build: string | null; detectedFrom: string } | null> {
  const procfile = await read('Procfile');
  const web = procfile?.split('\n').find((l) => /^web:/.test(l));
  const pkgText = await read('package.json');
  const pkg = pkgText === null ? null : parsePackage(pkgText);
  const python = (await read('requirements.txt')) !== null || (await read('pyproject.toml')) !== null;
  const build = pkg ? nodeBuild(pkg) : python ? pythonBuild(await read('requirements.txt')) : null;
  if (web) return { start: web.slice(4).trim(), build, detectedFrom: 'Procfile' };
  if (pkg) {
    if (pkg.scripts?.start) return { start: startScript(pkg.scripts), build, detectedFrom: 'package.json' };
    if (pkg.main) return { start: `node ${shellWord(pkg.main)}`, build, detectedFrom: 'package.json' };
    if ((await read('server.js')) !== null) return { start: 'node server.js', build, detectedFrom: 'package.json' };
  }
  let pyStart: string | null;
  try {
    pyStart = await pythonStart(read, python);
  } catch (e) {
    if (e instanceof PythonAppError) throw new RunspecError(e.message);
    throw e;
  }
  if (pyStart) return { start: pyStart, build, detectedFrom: 'python' };
  if ((await read('index.html')) !== null) {
    // A shell word for the supervisor's bash, not a JS template.
    return { start: 'python3 -m http.server "$PORT" --bind 0.0.0.0', build: null, detectedFrom: 'static' };
  }
  return null;
}

interface PackageJson {
  scripts?: Record<string, string>;
  main?: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

function parsePackage(text: string): PackageJson {
  try {
    return JSON.parse(text) as PackageJson;
  } catch {
    throw new RunspecError('package.json is not valid JSON');
  }
}

/**
 * The start script run as npm would (node_modules/.bin first on PATH) but without npm itself, whose own
 * start costs about a second on a loaded host; with prestart/poststart hooks npm runs it.
 */
function startScript(scripts: Record<string, string>): string {
  if (scripts.prestart || scripts.poststart) return 'npm start';
  return `PATH="$PWD/node_modules/.bin:$PATH" exec ${scripts.start}`;
}

/** Install only when there is something to install (an app without dependencies starts at once). */
function nodeBuild(pkg: PackageJson): string | null {
  const deps = Object.keys(pkg.dependencies ?? {}).length + Object.keys(pkg.devDependencies ?? {}).length;
  const install = deps > 0 ? 'if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi' : null;
  const build = pkg.scripts?.build ? 'npm run build' : null;
  return [install, build].filter((x) => x !== null).join(' && ') || null;
}

function pythonBuild(requirements: string | null): string {
  const venv = `python3 -m venv .venv || { echo 'this box has no python3-venv: build on a template that has it, or vendor the dependencies' >&2; exit 1; }`;
  if (requirements !== null) return `${venv} && .venv/bin/pip install -r requirements.txt`;
  return `${venv} && .venv/bin/pip install .`;
}

function shellWord(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
