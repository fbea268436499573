import type { Redis } from 'ioredis';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../platform/config-shape.js';
import type { Authenticator } from '../platform/auth.js';
import type { SecretBox } from '../platform/crypto.js';
import type { Bus } from '../platform/events.js';
import type { JobQueue } from '../platform/jobs.js';
import type { RateLimiter } from '../platform/limits.js';
import type { Metrics } from '../platform/metrics.js';
import type { NodeForwarder } from '../platform/node-forward.js';
import type { NodeRegistry } from '../platform/nodes.js';
import type { OutboundClient } from '../platform/outbound.js';
import type { Payments } from '../platform/payments.js';
import type { Outbox } from '../platform/outbox.js';
import type { Usage } from '../platform/usage.js';
import type { WorkspaceRegistry } from '../platform/workspaces.js';
import type { Store } from '../store/db.js';

/** What the platform hands every area when it builds its service. */
export interface PlatformDeps {
  config: Config;
  store: Store;
  bus: Bus;
  /**
   * Events (webhooks): record them in the transaction of the change they report,
   * `events.atomically(async (trx, emit) => ...)` or `events.record(trx, e)` then `events.wake()`.
   */
  events: Outbox;
  usage: Usage;
  /** Workspaces: areas holding resources register here (count, delete, the gate's lookup). */
  workspaces: WorkspaceRegistry;
  /** Prometheus series: areas add counters and scrape-time samples of what they hold (GET /metrics). */
  metrics: Metrics;
  jobs: JobQueue;
  auth: Authenticator;
  rateLimiter: RateLimiter;
  secretBox: SecretBox;
  /** The only way to make HTTP requests to outside hosts (platform/outbound.ts). */
  outbound: OutboundClient;
  /** The payment provider (Stripe Checkout, or nube's own page) every area takes payments through. */
  payments: Payments;
  /**
   * This process as a node: placement of new sandboxes and databases (`nodes.place`), where a held
   * resource's work runs (`nodes.route`), and what this node holds (`nodes.report`).
   */
  nodes: NodeRegistry;
  /** Areas register how to find the node holding a resource a request addresses. */
  forwarder: NodeForwarder;
  redis?: Redis;
  log: FastifyBaseLogger;
  /** Base URL for links handed to clients (presigned URLs, public URLs). */
  publicUrl(): string;
  /**
   * Base URL of nube's HTTPS listener (the public URL's host on the HTTPS port), or the public URL
   * itself when it is https; null when nube serves no HTTPS, or, given `forHost`, when its listener
   * has no certificate for that name (a handed-out https:// link must work).
   */
  httpsUrl(forHost?: string): string | null;
  /**
   * NUBE_BASE_URL for a box holding a key nube minted: the box API on the sandbox bridge
   * (platform/box-api.ts), started on first use. 503 where this nube has no sandbox network.
   */
  boxApiUrl(): Promise<string>;
}
