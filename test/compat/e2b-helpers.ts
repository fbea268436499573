// A nube for the E2B SDK tests: the SDK finds it through E2B's own environment variables only.
import { request } from 'node:http';
import { startSandboxNube, type SandboxNube } from '../sandboxes/helpers.js';

export async function startE2bNube(name: string, templates: string[] = ['base']): Promise<SandboxNube> {
  const t = await startSandboxNube(name, { NUBE_SANDBOX_DRIVER: 'namespaces' }, undefined, { templates });
  process.env.E2B_API_URL = `${t.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = t.baseUrl;
  process.env.E2B_API_KEY = t.ownerKey;
  return t;
}

/** GET through nube's listener with the Host getHost(port) gave (`*.localhost` may not resolve here). */
export function getViaHost(baseUrl: string, host: string, path = '/'): Promise<{ status: number; body: string }> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}
