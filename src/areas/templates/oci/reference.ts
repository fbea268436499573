// Image references as `docker pull` reads them: `python:3.12-slim` is docker.io/library/python,
// `ghcr.io/org/img@sha256:...` names a registry (a first component with a dot, a port or `localhost`).

export interface ImageRef {
  /** Registry host[:port] as written (`docker.io` for Docker Hub). */
  registry: string;
  /** Repository path (`library/python`). */
  repository: string;
  /** Tag, or the digest when pinned (`sha256:...`). */
  reference: string;
  /** The whole reference, normalized (`docker.io/library/python:3.12-slim`). */
  canonical: string;
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;
const HOST = /^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::\d{1,5})?$/;

/** The reference's parts, or a sentence saying what is wrong with it. */
export function parseImageRef(input: string): ImageRef | string {
  const text = input.trim();
  if (!text || text.length > 512) return 'an image reference is 1 to 512 characters';
  let rest = text;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) return `"${digest}" is not a sha256 digest (sha256: and 64 hex digits)`;
  }
  let tag: string | undefined;
  const slash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > slash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) return `"${tag}" is not a valid tag`;
  }
  const parts = rest.split('/');
  let registry = 'docker.io';
  const first = parts[0] ?? '';
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    registry = parts.shift()!;
    if (!HOST.test(registry)) return `"${registry}" is not a registry host`;
  }
  if (registry === 'index.docker.io' || registry === 'registry-1.docker.io') registry = 'docker.io';
  if (registry === 'docker.io' && parts.length === 1) parts.unshift('library');
  if (!parts.length || parts.some((p) => !COMPONENT.test(p))) {
    return `"${rest}" is not a repository name (lowercase letters, digits and . _ - between them, parts joined by /)`;
  }
  const repository = parts.join('/');
  const reference = digest ?? tag ?? 'latest';
  const canonical = `${registry}/${repository}${tag ? `:${tag}` : digest ? '' : ':latest'}${digest ? `@${digest}` : ''}`;
  return { registry, repository, reference, canonical };
}
