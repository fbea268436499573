// nube sandbox records in E2B's control-plane shapes (SandboxDetail, ListedSandbox, Sandbox).
import type { SandboxView } from '../../areas/sandboxes/views.js';
import { toE2bId } from './access.js';

/** envd protocol level nube speaks: every feature E2B's SDK gates up to 0.6.4 (stdin close, octet-stream and gzip uploads, file metadata, watch entries). */
export const ENVD_VERSION = '0.6.4';
/** Metadata key marking a sandbox created through E2B: every port of it is public, as on E2B. */
export const E2B_MARKER = 'nube.e2b';
/** Metadata key: a paused sandbox wakes on traffic to its ports (E2B's `autoResume`). */
export const AUTO_RESUME = 'nube.e2b.autoResume';
/** Metadata key, "false": its ports answer only requests with the traffic token (E2B's allowPublicTraffic). */
export const PUBLIC_TRAFFIC = 'nube.e2b.publicTraffic';
/** Metadata key: the Host its ports' servers see (E2B's maskRequestHost; `${PORT}` is the port). */
export const MASK_HOST = 'nube.e2b.maskRequestHost';
export const CLIENT_ID = 'nube';

const TEMPLATES: Record<string, string> = {
  base: 'base',
  'code-interpreter-v1': 'code-interpreter',
  'code-interpreter': 'code-interpreter',
};
const E2B_NAMES: Record<string, string> = { 'code-interpreter': 'code-interpreter-v1' };

export const nubeTemplate = (e2b: string) => TEMPLATES[e2b] ?? e2b;
export const e2bTemplate = (nube: string) => E2B_NAMES[nube] ?? nube;

export function e2bState(s: SandboxView): 'running' | 'paused' {
  return s.status === 'suspended' ? 'paused' : 'running';
}

/** The metadata the E2B caller set: nube's own `nube.e2b*` keys are the adapter's. */
function userMetadata(m: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(m).filter(([k]) => k !== E2B_MARKER && !k.startsWith(`${E2B_MARKER}.`)));
}

/** A sandbox that never expires has no end: E2B's clients want a date, so a far one. */
const FAR = '9999-12-31T23:59:59.000Z';

/** `mounts`: its volumes, as E2B names them (none: []). */
export function listed(s: SandboxView, mounts: { name: string; path: string }[] = []) {
  return {
    templateID: e2bTemplate(s.template),
    alias: e2bTemplate(s.template),
    sandboxID: toE2bId(s.id),
    clientID: CLIENT_ID,
    startedAt: s.createdAt,
    endAt: s.expiresAt ?? FAR,
    cpuCount: s.cpuCount,
    memoryMB: s.memoryMB,
    diskSizeMB: s.diskMB ?? 0,
    metadata: userMetadata(s.metadata as Record<string, string>),
    state: e2bState(s),
    envdVersion: ENVD_VERSION,
    volumeMounts: mounts,
  };
}

/**
 * GET's answer. `pauseKeeps` is nube's own: what a pause keeps on this driver, the files only or the
 * running processes and memory too (E2B's pause keeps them all).
 */
export function detail(s: SandboxView, domain: string, token: string, pauseKeeps: 'files' | 'processes', mounts?: { name: string; path: string }[]) {
  const m = s.metadata as Record<string, string>;
  return {
    ...listed(s, mounts),
    envdAccessToken: token,
    domain,
    lifecycle: { onTimeout: s.suspendOnIdle ? 'pause' : 'kill', autoResume: m[AUTO_RESUME] === 'true' },
    network: { allowPublicTraffic: m[PUBLIC_TRAFFIC] !== 'false', ...(m[MASK_HOST] ? { maskRequestHost: m[MASK_HOST] } : {}) },
    pauseKeeps,
  };
}

/** The answer to create and connect: what the SDK needs to reach the sandbox. */
export function created(s: SandboxView, domain: string, token: string, trafficToken: string) {
  return {
    templateID: e2bTemplate(s.template),
    alias: e2bTemplate(s.template),
    sandboxID: toE2bId(s.id),
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: token,
    trafficAccessToken: trafficToken,
    domain,
  };
}
