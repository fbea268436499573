// How a Python app tree is served: a WSGI/ASGI app object through the server its requirements name
// (gunicorn, uvicorn or hypercorn), a `wsgi.py` with no server through the standard library's wsgiref,
// else the first of app.py, main.py, server.py run as a script.

export class PythonAppError extends Error {}

const MODULES = ['wsgi', 'asgi', 'app', 'main', 'server'];
/** A module-level app object: `application` (WSGI's convention) or `app`, assigned or defined as a function. */
const APP_OBJECT = /^(?:(?:async\s+)?def\s+(application|app)\s*\(|(application|app)\s*(?::[^=]+)?=)/m;

/** `python` says whether the tree declares dependencies (requirements.txt or pyproject.toml): then a venv is built. */
export async function pythonStart(read: (name: string) => Promise<string | null>, python: boolean): Promise<string | null> {
  const py = python ? '.venv/bin/python' : 'python3';
  const bin = (name: string) => (python ? `.venv/bin/${name}` : name);
  const deps = `${(await read('requirements.txt')) ?? ''}\n${(await read('pyproject.toml')) ?? ''}`.toLowerCase();
  const has = (pkg: string) => new RegExp(`(^|[\\s"'\\[,])${pkg}([\\s"'\\]<>=~!;,\\[]|$)`, 'm').test(deps);
  const sources = new Map<string, string>();
  for (const m of MODULES) {
    const text = await read(`${m}.py`);
    if (text !== null) sources.set(m, text);
  }
  const appObject = (m: string) => {
    const found = sources.get(m)?.match(APP_OBJECT);
    return found ? (found[1] ?? found[2]) : undefined;
  };
  for (const m of sources.keys()) {
    const obj = appObject(m);
    if (!obj) continue;
    if (has('uvicorn')) return `exec ${bin('uvicorn')} ${m}:${obj} --host 0.0.0.0 --port "$PORT"`;
    if (has('hypercorn')) return `exec ${bin('hypercorn')} ${m}:${obj} --bind "0.0.0.0:$PORT"`;
    if (has('gunicorn')) return `exec ${bin('gunicorn')} --bind "0.0.0.0:$PORT" ${m}:${obj}`;
  }
  const wsgi = appObject('wsgi');
  if (wsgi) {
    const serve = `import os, wsgi; from wsgiref.simple_server import make_server; make_server('0.0.0.0', int(os.environ['PORT']), wsgi.${wsgi}).serve_forever()`;
    return `exec ${py} -c "${serve}"`;
  }
  if (appObject('asgi')) throw new PythonAppError('asgi.py needs an ASGI server: add uvicorn or hypercorn to requirements.txt, or a Procfile web: line');
  for (const m of ['app', 'main', 'server']) if (sources.has(m)) return `${py} ${m}.py`;
  return null;
}
