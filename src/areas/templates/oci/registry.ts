// A client of the OCI distribution API (what `docker pull` speaks), over nube's one outbound client:
// manifests (an index or a Docker manifest list picks linux/amd64), the image config, and blobs kept
// by digest. Authentication as registries ask for it in WWW-Authenticate: Bearer (Docker Hub's token
// flow: a token from the realm for `repository:<name>:pull`, with the user's credentials when given)
// or Basic. Public registries are reached over HTTPS under the outbound address rules; a private one
// only when the operator lists its origin (NUBE_TEMPLATE_REGISTRY_ALLOW), `http://` ones in plain HTTP.
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import {
  OutboundBlockedError,
  type OutboundClient,
  OutboundError,
  type OutboundResponse,
} from '../../../platform/outbound.js';
import { TemplateBuildError } from './errors.js';
import type { ImageRef } from './reference.js';

export interface RegistryAuth {
  username: string;
  password: string;
}

export const MEDIA = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
} as const;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

/** What a container starts with, from the image config. */
export interface ImageConfig {
  env: string[];
  cmd: string[] | null;
  entrypoint: string[] | null;
  workdir: string | null;
  user: string | null;
  exposedPorts: string[];
}

export interface ResolvedImage {
  /** Digest of the linux/amd64 image manifest. */
  digest: string;
  layers: Descriptor[];
  config: ImageConfig;
}

const MAX_MANIFEST = 4 * 1024 * 1024;
const DIGEST = /^sha256:([0-9a-f]{64})$/;

interface Session {
  base: string;
  trusted?: string;
  repository: string;
  auth?: RegistryAuth;
  authorization?: string;
  registry: string;
}

/** `Bearer realm="...",service="..."` -> { scheme, params }. */
export function parseChallenge(header: string): { scheme: string; params: Record<string, string> } {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(header);
  const params: Record<string, string> = {};
  for (const p of (m?.[2] ?? '').matchAll(/([A-Za-z0-9_-]+)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g)) {
    params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : (p[3] ?? '');
  }
  return { scheme: (m?.[1] ?? '').toLowerCase(), params };
}

function platformOf(m: { platform?: { os?: string; architecture?: string } }): string {
  return `${m.platform?.os ?? '?'}/${m.platform?.architecture ?? '?'}`;
}

function strings(v: unknown): string[] | null {
  return Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : null;
}

export class RegistryClient {
  private readonly allowed: Map<string, string>;

  constructor(
    private readonly outbound: OutboundClient,
    /** Origins of registries the operator allows although private (`http://10.0.0.5:5000`, `https://reg.lan`). */
    allow: readonly string[],
    /** Where blobs are kept by digest (`<dir>/sha256/<hex>`). */
    private readonly blobDir: string,
  ) {
    this.allowed = new Map(allow.map((o) => [new URL(o).host, new URL(o).origin]));
  }

  private session(ref: ImageRef, auth?: RegistryAuth): Session {
    const host = ref.registry === 'docker.io' ? 'registry-1.docker.io' : ref.registry;
    const trusted = this.allowed.get(host);
    return {
      base: trusted ?? `https://${host}`,
      trusted,
      repository: ref.repository,
      auth,
      registry: ref.registry,
    };
  }

  /** One GET with the session's credentials; a 401 is answered once as the registry's challenge asks. */
  private async get(
    s: Session,
    path: string,
    headers: Record<string, string>,
    o: { redirects?: number; signal?: AbortSignal } = {},
  ): Promise<OutboundResponse> {
    const send = () =>
      this.call(
        `${s.base}${path}`,
        s,
        { ...headers, ...(s.authorization ? { authorization: s.authorization } : {}) },
        o,
      );
    let res = await send();
    if (res.status !== 401) return res;
    const challenge = res.header('www-authenticate');
    res.discard();
    if (!challenge)
      throw new TemplateBuildError(
        'AuthRefused',
        `${s.registry} refused the request (401) without saying how to authenticate`,
      );
    await this.authenticate(s, challenge, o.signal);
    res = await send();
    if (res.status === 401 || res.status === 403) {
      res.discard();
      throw new TemplateBuildError(
        'AuthRefused',
        s.auth
          ? `${s.registry} refused the credentials given in registryAuth for ${s.repository}`
          : `${s.registry} asks for credentials to pull ${s.repository} (give registryAuth), or the repository does not exist`,
      );
    }
    return res;
  }

  private async call(
    url: string,
    s: Session,
    headers: Record<string, string>,
    o: { redirects?: number; signal?: AbortSignal },
  ): Promise<OutboundResponse> {
    try {
      return await this.outbound.request(url, {
        headers,
        maxRedirects: o.redirects ?? 0,
        signal: o.signal,
        trustedOrigin: s.trusted,
        timeoutMs: o.redirects ? undefined : 60_000,
      });
    } catch (e) {
      if (e instanceof OutboundBlockedError) {
        throw new TemplateBuildError(
          'RegistryRefused',
          `${s.registry} is not reachable from nube: ${e.message} (an operator allows a private registry with NUBE_TEMPLATE_REGISTRY_ALLOW)`,
        );
      }
      if (e instanceof OutboundError && e.code === 'OutboundAborted')
        throw new TemplateBuildError('Canceled', 'the build was canceled');
      throw new TemplateBuildError(
        'RegistryUnreachable',
        `${s.registry} could not be reached: ${(e as Error).message}`,
      );
    }
  }

  private async authenticate(s: Session, header: string, signal?: AbortSignal): Promise<void> {
    const { scheme, params } = parseChallenge(header);
    const basic = s.auth
      ? `Basic ${Buffer.from(`${s.auth.username}:${s.auth.password}`).toString('base64')}`
      : undefined;
    if (scheme === 'basic') {
      if (!basic)
        throw new TemplateBuildError(
          'AuthRefused',
          `${s.registry} asks for a user name and password (give registryAuth)`,
        );
      s.authorization = basic;
      return;
    }
    if (scheme !== 'bearer' || !params.realm) {
      throw new TemplateBuildError(
        'AuthRefused',
        `${s.registry} asks for an authentication nube does not speak (${scheme || 'none'})`,
      );
    }
    let realm: URL;
    try {
      realm = new URL(params.realm);
    } catch {
      throw new TemplateBuildError('RegistryError', `${s.registry} named an invalid token realm`);
    }
    if (params.service) realm.searchParams.set('service', params.service);
    realm.searchParams.set('scope', params.scope ?? `repository:${s.repository}:pull`);
    const trusted = this.allowed.get(realm.host);
    const res = await this.call(realm.href, { ...s, trusted }, basic ? { authorization: basic } : {}, {
      signal,
    });
    if (res.status === 401 || res.status === 403) {
      res.discard();
      throw new TemplateBuildError(
        'AuthRefused',
        `the token service of ${s.registry} refused ${s.auth ? 'the credentials given in registryAuth' : 'an anonymous pull'}`,
      );
    }
    if (res.status !== 200) {
      res.discard();
      throw new TemplateBuildError(
        'RegistryError',
        `the token service of ${s.registry} answered ${res.status}`,
      );
    }
    const body = (await res.body.json().catch(() => ({}))) as { token?: unknown; access_token?: unknown };
    const token =
      typeof body.token === 'string'
        ? body.token
        : typeof body.access_token === 'string'
          ? body.access_token
          : '';
    if (!token)
      throw new TemplateBuildError('RegistryError', `the token service of ${s.registry} answered no token`);
    s.authorization = `Bearer ${token}`;
  }

  private async manifest(
    s: Session,
    reference: string,
    signal?: AbortSignal,
  ): Promise<{ type: string; bytes: Buffer }> {
    const accept = [MEDIA.ociIndex, MEDIA.dockerList, MEDIA.ociManifest, MEDIA.dockerManifest].join(', ');
    const res = await this.get(
      s,
      `/v2/${s.repository}/manifests/${reference}`,
      { accept },
      { redirects: 3, signal },
    );
    if (res.status === 404) {
      res.discard();
      throw new TemplateBuildError(
        'ImageNotFound',
        `image ${s.registry}/${s.repository}:${reference} not found (no such repository or tag)`,
      );
    }
    if (res.status !== 200) {
      res.discard();
      throw new TemplateBuildError(
        'RegistryError',
        `${s.registry} answered ${res.status} for the manifest of ${s.repository}:${reference}`,
      );
    }
    const bytes = await readCapped(res, MAX_MANIFEST, `the manifest of ${s.repository}`);
    let type = (res.header('content-type') ?? '').split(';')[0]!.trim();
    try {
      const parsed = JSON.parse(bytes.toString('utf8')) as {
        mediaType?: string;
        schemaVersion?: number;
        manifests?: unknown;
      };
      if (parsed.mediaType) type = parsed.mediaType;
      else if (parsed.schemaVersion === 2 && Array.isArray(parsed.manifests)) type = MEDIA.ociIndex;
      else if (parsed.schemaVersion === 1) type = 'schema1';
    } catch {
      throw new TemplateBuildError(
        'RegistryError',
        `the manifest of ${s.repository}:${reference} is not JSON`,
      );
    }
    const pinned = DIGEST.exec(reference);
    if (pinned && sha256(bytes) !== pinned[1]) {
      throw new TemplateBuildError(
        'DigestMismatch',
        `the manifest ${s.registry} sent for ${reference} has another digest (sha256:${sha256(bytes)}): refused`,
      );
    }
    return { type, bytes };
  }

  /** The linux/amd64 image the reference names: its manifest digest, layers and config. */
  async resolve(
    ref: ImageRef,
    auth?: RegistryAuth,
    signal?: AbortSignal,
  ): Promise<ResolvedImage & { session: Session }> {
    const s = this.session(ref, auth);
    let m = await this.manifest(s, ref.reference, signal);
    let digest = `sha256:${sha256(m.bytes)}`;
    if (m.type === MEDIA.ociIndex || m.type === MEDIA.dockerList) {
      const list = JSON.parse(m.bytes.toString('utf8')) as {
        manifests?: (Descriptor & { platform?: { os?: string; architecture?: string } })[];
      };
      const entries = list.manifests ?? [];
      const pick = entries.find((e) => e.platform?.os === 'linux' && e.platform?.architecture === 'amd64');
      if (!pick || !DIGEST.test(pick.digest)) {
        const has = entries.map(platformOf).join(', ') || 'none';
        throw new TemplateBuildError(
          'UnsupportedImage',
          `image ${ref.canonical} has no linux/amd64 variant (it has: ${has})`,
        );
      }
      m = await this.manifest(s, pick.digest, signal);
      digest = pick.digest;
    }
    if (m.type !== MEDIA.ociManifest && m.type !== MEDIA.dockerManifest) {
      throw new TemplateBuildError(
        'UnsupportedImage',
        `image ${ref.canonical} has a manifest of type ${m.type || 'unknown'}, which nube does not read`,
      );
    }
    const man = JSON.parse(m.bytes.toString('utf8')) as { config?: Descriptor; layers?: Descriptor[] };
    const layers = man.layers ?? [];
    if (
      !man.config ||
      !DIGEST.test(man.config.digest) ||
      layers.some((l) => !DIGEST.test(l.digest) || !Number.isSafeInteger(l.size) || l.size < 0)
    ) {
      throw new TemplateBuildError('UnsupportedImage', `the manifest of ${ref.canonical} is malformed`);
    }
    const configPath = await this.blob(s, man.config, MAX_MANIFEST, undefined, signal);
    let raw: { config?: Record<string, unknown>; architecture?: string; os?: string };
    try {
      raw = JSON.parse(await readFile(configPath, 'utf8'));
    } catch {
      throw new TemplateBuildError('UnsupportedImage', `the config of ${ref.canonical} is not JSON`);
    }
    const c = raw.config ?? {};
    const config: ImageConfig = {
      env: strings(c.Env) ?? [],
      cmd: strings(c.Cmd),
      entrypoint: strings(c.Entrypoint),
      workdir: typeof c.WorkingDir === 'string' && c.WorkingDir ? c.WorkingDir : null,
      user: typeof c.User === 'string' && c.User ? c.User : null,
      exposedPorts: c.ExposedPorts && typeof c.ExposedPorts === 'object' ? Object.keys(c.ExposedPorts) : [],
    };
    return { digest, layers, config, session: s };
  }

  /** Where blob `digest` is kept (whether or not it is there yet). */
  blobPath(digest: string): string {
    const m = DIGEST.exec(digest);
    if (!m) throw new TemplateBuildError('UnsupportedImage', `unsupported digest ${digest}`);
    return `${this.blobDir}/sha256/${m[1]}`;
  }

  /**
   * The blob's path in the cache, fetching it when missing: its bytes are checked against the digest
   * as they arrive, and a blob that does not match (or is longer than the manifest said) is refused
   * and nothing of it is kept. `onBytes` hears each chunk's size (progress).
   */
  async blob(
    s: Session,
    d: Descriptor,
    max: number,
    onBytes?: (n: number) => void,
    signal?: AbortSignal,
  ): Promise<string> {
    const path = this.blobPath(d.digest);
    if (existsSync(path)) return path;
    if (d.size > max)
      throw new TemplateBuildError(
        'TooLarge',
        `blob ${d.digest} is ${d.size} bytes, more than the ${max} allowed`,
      );
    await mkdir(`${this.blobDir}/sha256`, { recursive: true });
    const res = await this.get(s, `/v2/${s.repository}/blobs/${d.digest}`, {}, { redirects: 5, signal });
    if (res.status === 404) {
      res.discard();
      throw new TemplateBuildError(
        'ImageNotFound',
        `${s.registry} has no blob ${d.digest} for ${s.repository}`,
      );
    }
    if (res.status !== 200) {
      res.discard();
      throw new TemplateBuildError(
        'RegistryError',
        `${s.registry} answered ${res.status} for blob ${d.digest}`,
      );
    }
    const tmp = `${path}.part-${process.pid}-${randomBytes(4).toString('hex')}`;
    const hash = createHash('sha256');
    let size = 0;
    const limit = Math.min(max, d.size);
    const check = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        if (size > limit)
          return done(
            new TemplateBuildError(
              'DigestMismatch',
              `blob ${d.digest} is longer than the ${d.size} bytes its manifest says: refused`,
            ),
          );
        hash.update(chunk);
        onBytes?.(chunk.length);
        done(null, chunk);
      },
    });
    try {
      await pipeline(res.body, check, createWriteStream(tmp, { mode: 0o600 }), { signal });
      const got = `sha256:${hash.digest('hex')}`;
      if (got !== d.digest || size !== d.size) {
        throw new TemplateBuildError(
          'DigestMismatch',
          `layer ${d.digest} from ${s.registry} has digest ${got} (${size} bytes): refused, nothing kept`,
        );
      }
      await rename(tmp, path);
    } catch (e) {
      await rm(tmp, { force: true });
      if (e instanceof TemplateBuildError) throw e;
      if (signal?.aborted) throw new TemplateBuildError('Canceled', 'the build was canceled');
      throw new TemplateBuildError(
        'RegistryUnreachable',
        `blob ${d.digest} could not be fetched from ${s.registry}: ${(e as Error).message}`,
      );
    }
    return path;
  }
}

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

async function readCapped(res: OutboundResponse, max: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of res.body) {
    n += (c as Buffer).length;
    if (n > max) {
      res.body.destroy();
      throw new TemplateBuildError('TooLarge', `${what} is larger than ${max} bytes`);
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}
