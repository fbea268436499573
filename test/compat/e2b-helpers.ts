// A nube for the E2B SDK tests: the SDK finds it through E2B's own environment variables only.
import { startSandboxNube, type SandboxNube } from '../sandboxes/helpers.js';

export async function startE2bNube(name: string, templates: string[] = ['base'], env: Record<string, string> = {}): Promise<SandboxNube> {
  const t = await startSandboxNube(name, { NUBE_SANDBOX_DRIVER: 'namespaces', ...env }, undefined, { templates });
  process.env.E2B_API_URL = `${t.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = t.baseUrl;
  process.env.E2B_API_KEY = t.ownerKey;
  return t;
}
