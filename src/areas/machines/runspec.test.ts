import { describe, expect, it } from 'vitest';
import { matcher } from './app.js';
import { resolveRunspec, RunspecError } from './runspec.js';

const tree = (files: Record<string, string>) => async (name: string) => files[name] ?? null;

describe('runspec resolution', () => {
  it('prefers nube.json, then a Procfile, then detection', async () => {
    const pkg = JSON.stringify({ scripts: { start: 'node a.js' } });
    expect(await resolveRunspec(tree({ 'nube.json': JSON.stringify({ start: 'x', port: 9, dataPaths: ['/d'] }), Procfile: 'web: y', 'package.json': pkg }))).toMatchObject({
      start: 'x',
      port: 9,
      dataPaths: ['/d'],
      detectedFrom: 'nube.json',
    });
    expect(await resolveRunspec(tree({ Procfile: 'worker: z\nweb: y --flag', 'package.json': pkg }))).toMatchObject({ start: 'y --flag', detectedFrom: 'Procfile' });
    expect(await resolveRunspec(tree({ 'package.json': pkg }))).toMatchObject({ start: 'PATH="$PWD/node_modules/.bin:$PATH" exec node a.js', build: null });
  });

  it('installs Node dependencies only when there are some, and runs a build script', async () => {
    const withDeps = JSON.stringify({ main: 's.js', dependencies: { x: '1' }, scripts: { build: 'tsc' } });
    const r = await resolveRunspec(tree({ 'package.json': withDeps }));
    expect(r.start).toBe("node 's.js'");
    expect(r.build).toContain('npm install');
    expect(r.build).toContain('npm run build');
    expect((await resolveRunspec(tree({ 'package.json': JSON.stringify({ main: 's.js' }) }))).build).toBeNull();
    expect((await resolveRunspec(tree({ 'package.json': JSON.stringify({ scripts: { prestart: 'a', start: 'b' } }) }))).start).toBe('npm start');
  });

  it('detects Python apps and static sites; launch overrides win', async () => {
    expect(await resolveRunspec(tree({ 'app.py': '' }))).toMatchObject({ start: 'python3 app.py', build: null, detectedFrom: 'python' });
    expect(await resolveRunspec(tree({ 'main.py': '', 'requirements.txt': 'flask' }))).toMatchObject({ start: '.venv/bin/python main.py' });
    expect((await resolveRunspec(tree({ 'index.html': '<p>' }))).detectedFrom).toBe('static');
    expect(await resolveRunspec(tree({ 'index.html': '<p>' }), { start: 'custom', port: 5 })).toMatchObject({ start: 'custom', port: 5, detectedFrom: 'launch' });
  });

  it('serves a WSGI/ASGI app object through the server its requirements name, else wsgiref', async () => {
    const flask = 'from flask import Flask\napp = Flask(__name__)\n';
    expect((await resolveRunspec(tree({ 'app.py': flask, 'requirements.txt': 'flask\ngunicorn==22.0\n' }))).start).toBe(
      'exec .venv/bin/gunicorn --bind "0.0.0.0:$PORT" app:app',
    );
    expect((await resolveRunspec(tree({ 'main.py': 'app = FastAPI()\n', 'pyproject.toml': 'dependencies = ["fastapi", "uvicorn[standard]"]' }))).start).toBe(
      'exec .venv/bin/uvicorn main:app --host 0.0.0.0 --port "$PORT"',
    );
    expect((await resolveRunspec(tree({ 'wsgi.py': 'def application(env, start):\n    pass\n' }))).start).toMatch(/^exec python3 -c ".*make_server.*wsgi\.application\)/);
    // `gunicornish` is not gunicorn; a script without an app object runs as a script.
    expect((await resolveRunspec(tree({ 'app.py': 'print(1)\n', 'requirements.txt': 'gunicornish' }))).start).toBe('.venv/bin/python app.py');
    await expect(resolveRunspec(tree({ 'asgi.py': 'app = Starlette()\n' }))).rejects.toThrow(/needs an ASGI server/);
  });

  it('says what is wrong with a tree it cannot run', async () => {
    await expect(resolveRunspec(tree({}))).rejects.toThrow(RunspecError);
    await expect(resolveRunspec(tree({ 'nube.json': '{' }))).rejects.toThrow(/not valid JSON/);
    await expect(resolveRunspec(tree({ 'nube.json': JSON.stringify({ start: 'x', dataPaths: ['relative'] }) }))).rejects.toThrow(/dataPaths/);
  });
});

describe('logs grep', () => {
  const lines = ['GET /a', 'POST /b', 'get /c'];
  it('matches substrings and /regex/flags', () => {
    expect(matcher('GET')(lines)).toEqual(['GET /a']);
    expect(matcher('/^get/i')(lines)).toEqual(['GET /a', 'get /c']);
    expect(matcher(undefined)(lines)).toEqual(lines);
  });
  it('refuses an invalid or runaway regular expression with a 400', () => {
    expect(() => matcher('/(/')).toThrow(expect.objectContaining({ status: 400 }));
    const evil = [`${'a'.repeat(40)}!`];
    expect(() => matcher('/^(a+)+$/')(evil)).toThrow(expect.objectContaining({ status: 400 }));
  });
});
