// What the control plane hands its extras (fork, metrics, snapshots): a way to mount a route and to
// read a sandbox once it has settled, kept apart so the extras need not import the control plane.
import type { FastifyRequest } from 'fastify';
import type { SandboxView } from '../../areas/sandboxes/views.js';
import type { Principal } from '../../platform/auth.js';

export type Route = (
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  fn: (
    p: Principal,
    req: FastifyRequest<{
      Params: { id: string };
      Querystring: Record<string, string | string[] | undefined>;
    }>,
  ) => Promise<{ status: number; body?: unknown; headers?: Record<string, string> }>,
) => void;

/** The control plane as its extras see it. */
export interface SettledSandboxes {
  /** The sandbox once it is past starting, or its error. */
  settled(p: Principal, id: string): Promise<SandboxView>;
  /** The E2B body for a created sandbox. */
  answer(p: Principal, s: SandboxView): unknown;
}
