// nube sandbox records in E2B's control-plane shapes (SandboxDetail, ListedSandbox, Sandbox).
import type { SandboxView } from '../../areas/sandboxes/views.js';
import { toE2bId } from './access.js';

/** envd protocol level nube speaks: process and filesystem RPCs, /files multipart, no stdin close (0.5.2). */
export const ENVD_VERSION = '0.5.1';
/** Metadata key marking a sandbox created through E2B: every port of it is public, as on E2B. */
export const E2B_MARKER = 'nube.e2b';
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

function userMetadata(m: Record<string, string>): Record<string, string> {
  const { [E2B_MARKER]: _, ...rest } = m;
  return rest;
}

/** A sandbox that never expires has no end: E2B's clients want a date, so a far one. */
const FAR = '9999-12-31T23:59:59.000Z';

export function listed(s: SandboxView) {
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
    volumeMounts: [],
  };
}

export function detail(s: SandboxView, domain: string, token: string) {
  return { ...listed(s), envdAccessToken: token, domain };
}

/** The answer to create and connect: what the SDK needs to reach the sandbox. */
export function created(s: SandboxView, domain: string, token: string) {
  return {
    templateID: e2bTemplate(s.template),
    alias: e2bTemplate(s.template),
    sandboxID: toE2bId(s.id),
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: token,
    trafficAccessToken: token,
    domain,
  };
}
