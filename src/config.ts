import { createHash, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { join, resolve } from 'node:path';
// The only place that reads process.env. Everything else receives a Config (its shape is in
// platform/config-shape.ts, so no module imports this one but the entry points).
import { z } from 'zod';
import {
  type Config,
  type DatabasesConfig,
  FILE_REGION_NAMES,
  type FilesConfig,
  LOG_LEVELS,
  type MetricsConfig,
  type NodesConfig,
} from './platform/config-shape.js';
import { cidrsOverlap, parseAllowList } from './platform/outbound-address.js';
import { PLAN_NAMES } from './platform/plans.js';

export type {
  CgroupChoice,
  Config,
  DatabasesConfig,
  FilesConfig,
  LlmConfig,
  LogLevel,
  MetricsConfig,
  NodesConfig,
  PdfConfig,
  SandboxesConfig,
  WebConfig,
} from './platform/config-shape.js';
export { FILE_REGION_NAMES } from './platform/config-shape.js';
export { PLAN_NAMES, type PlanName } from './platform/plans.js';

export const OWNER_KEY_PATTERN = /^nube_sk_live_[A-Za-z0-9]{32,}$/;

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no'])
  .transform((v) => v === '1' || v === 'true' || v === 'yes');

function isOrigin(v: string): boolean {
  try {
    const u = new URL(v);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === v.replace(/\/$/, '');
  } catch {
    return false;
  }
}

const csv = z.string().transform((s) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean),
);

const envSchema = z.object({
  NUBE_HOST: z.string().min(1).default('127.0.0.1'),
  NUBE_PORT: z.coerce.number().int().min(0).max(65535).default(7070),
  NUBE_DATA_DIR: z.string().min(1).default('./data'),
  NUBE_PUBLIC_URL: z.url().optional(),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL')
    .optional(),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, 'must be a redis:// URL')
    .optional(),
  NUBE_OWNER_KEY: z
    .string()
    .regex(
      OWNER_KEY_PATTERN,
      'must look like nube_sk_live_ followed by at least 32 characters of [A-Za-z0-9]',
    )
    .optional(),
  NUBE_OWNER_PLAN: z.enum(PLAN_NAMES).default('tera'),
  NUBE_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  NUBE_LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  NUBE_BODY_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .default(10 * 1024 * 1024),
  NUBE_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).default(600),
  // Sandbox creations a minute per owner (the spec's 10), and per plan (NUBE_SANDBOX_CREATE_PER_MINUTE_TERA=...).
  NUBE_SANDBOX_CREATE_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(10),
  NUBE_SANDBOX_CREATE_PER_MINUTE_BYTE: z.coerce.number().int().min(1).max(1_000_000).optional(),
  NUBE_SANDBOX_CREATE_PER_MINUTE_MEGA: z.coerce.number().int().min(1).max(1_000_000).optional(),
  NUBE_SANDBOX_CREATE_PER_MINUTE_TERA: z.coerce.number().int().min(1).max(1_000_000).optional(),
  NUBE_AUTH_CACHE_MS: z.coerce.number().int().min(0).max(60_000).default(2_000),
  // The audit log (issue 32): off only to measure what it costs.
  NUBE_AUDIT: bool.default(true),
  // Refusals of unknown credentials: the first few per address and window are entries of their own,
  // the rest one entry with their count at the window's end (areas/audit/refusals.ts).
  NUBE_AUDIT_REFUSAL_WINDOW_S: z.coerce.number().int().min(1).max(3600).default(60),
  NUBE_JOB_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(250),
  NUBE_WORKERS: bool.default(true),
  // How long close() waits for open responses (streams included) before cutting their connections.
  NUBE_SHUTDOWN_GRACE_MS: z.coerce.number().int().min(0).max(600_000).default(10_000),
  // CIDRs that outbound fetches (web, webhooks, launch) may reach although private/loopback.
  NUBE_OUTBOUND_ALLOW: csv.default([]),
  // Reverse proxies (addresses or CIDRs) whose X-Forwarded-For/-Proto/-Host nube believes.
  NUBE_TRUST_PROXY: csv
    .pipe(z.array(z.string().refine(isCidr, 'must be IP addresses or CIDRs, comma separated')))
    .default([]),
  // Webhook delivery: per-attempt timeout, and the waits before each retry (ms, or 5s/5m/2h).
  NUBE_WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(50).max(120_000).default(10_000),
  NUBE_WEBHOOK_RETRY_SCHEDULE: csv
    .pipe(
      z
        .array(z.string().regex(/^\d+(ms|s|m|h)?$/, 'durations like 500ms, 5s, 5m, 2h'))
        .min(1)
        .max(20),
    )
    .default(['5s', '5m', '30m', '2h', '5h', '10h', '10h']),
  // Files: blob backend per region, semantic search embeddings.
  NUBE_BLOB_BACKEND: z.enum(['local', 's3']).default('local'),
  NUBE_BLOB_DIR: z.string().min(1).optional(),
  NUBE_S3_ENDPOINT: z.url().optional(),
  NUBE_S3_REGION: z.string().min(1).default('us-east-1'),
  NUBE_S3_ACCESS_KEY_ID: z.string().min(1).optional(),
  NUBE_S3_SECRET_ACCESS_KEY: z.string().min(1).optional(),
  NUBE_S3_FORCE_PATH_STYLE: bool.default(true),
  NUBE_S3_BUCKET: z.string().min(1).optional(),
  NUBE_S3_BUCKET_LATAM: z.string().min(1).optional(),
  NUBE_S3_BUCKET_US: z.string().min(1).optional(),
  NUBE_S3_BUCKET_EU: z.string().min(1).optional(),
  NUBE_FILES_AI_BASE_URL: z.url().default('https://api.openai.com/v1'),
  NUBE_FILES_AI_KEY: z.string().min(1).optional(),
  NUBE_FILES_AI_MODEL: z.string().min(1).default('text-embedding-3-small'),
  // Sandboxes: isolation driver, host of the per-port public URLs, where templates live, templates
  // built at start, and the host bridge and cgroup parent (tests use their own).
  NUBE_SANDBOX_DRIVER: z.enum(['namespaces', 'gvisor']).default('namespaces'),
  NUBE_SANDBOX_PUBLIC_HOST: z
    .string()
    .regex(/^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/, 'must be a lowercase host name')
    .default('sandbox.localhost'),
  NUBE_TEMPLATES_DIR: z.string().min(1).optional(),
  NUBE_SANDBOX_PREBUILD: csv.default([]),
  NUBE_SANDBOX_BRIDGE: z
    .string()
    .regex(/^[a-z0-9]{1,12}:\d+\.\d+\.\d+\.\d+\/\d+$/, 'must look like nube0:10.77.0.1/16')
    .default('nube0:10.77.0.1/16'),
  NUBE_SANDBOX_CGROUP: z
    .string()
    .regex(/^[a-z0-9-]{1,32}$/)
    .default('nube'),
  NUBE_SANDBOX_CGROUPS: z.enum(['auto', 'v1', 'v2']).default('auto'),
  // The host's cgroup2 mount gets `favordynmods` (fast task migrations; see cgroup-tuning.ts).
  NUBE_SANDBOX_FAVOR_DYNMODS: z.enum(['true', 'false']).default('true'),
  // Warm pool: sandboxes started ahead per template in use (0 turns it off), its upper bound when
  // creations come fast, and the share of the host's available memory pooled sandboxes may take.
  NUBE_SANDBOX_POOL: z.coerce.number().int().min(0).max(64).default(2),
  NUBE_SANDBOX_POOL_MAX: z.coerce.number().int().min(0).max(256).default(16),
  NUBE_SANDBOX_POOL_MEMORY_PERCENT: z.coerce.number().min(0).max(50).default(5),
  // How long a sandbox suspended with its memory (frozen in the host's RAM) keeps it; then its files only.
  NUBE_SANDBOX_MEMORY_HOLD_MINUTES: z.coerce.number().min(0).max(525_600).default(60),
  // Where upper dirs and snapshots live: `auto` a reflink-capable store (the data dir's own xfs/btrfs,
  // else a sparse XFS image in it, so forks and snapshots share blocks), `copy` the data dir as it is.
  NUBE_SANDBOX_STORE: z.enum(['auto', 'copy']).default('auto'),
  // Templates from images: registries reached although private (origins; `http://` ones in plain
  // HTTP), and what one template may unpack to (bytes of file content).
  NUBE_TEMPLATE_REGISTRY_ALLOW: csv
    .pipe(
      z.array(
        z
          .string()
          .refine(
            isOrigin,
            'must be origins like http://10.0.0.5:5000 or https://registry.lan, comma separated',
          ),
      ),
    )
    .default([]),
  NUBE_TEMPLATE_MAX_BYTES: z.coerce
    .number()
    .int()
    .min(1024 * 1024)
    .default(20 * 1024 ** 3),
  // Size of that image when nube makes it (sparse: it takes only what is written): 500G, 2T, 80000M.
  NUBE_SANDBOX_STORE_SIZE: z
    .string()
    .regex(/^\d+[MGT]$/, 'must be a size like 500G, 2T or 80000M')
    .transform(
      (v) => Number(v.slice(0, -1)) * 1024 ** ({ M: 2, G: 3, T: 4 } as const)[v.slice(-1) as 'M' | 'G' | 'T'],
    )
    .optional(),
  NUBE_SANDBOX_MIRROR: z
    .url({ protocol: /^https?$/, error: 'must be an http(s) URL of a Debian mirror' })
    .optional(),
  // Free space (GB) the host keeps: a new store image is at most the free space less this, and doctor
  // and /metrics warn as the store nears it. Read here once, as every setting.
  NUBE_STORE_RESERVE_GB: z.coerce.number().min(0).max(100_000).default(10),
  // Private, loopback and link-local IPv4 ranges a sandbox's network policy may open (allowOut); empty: none.
  NUBE_SANDBOX_PRIVATE_ALLOW: csv
    .pipe(
      z.array(
        z
          .string()
          .refine(
            (v) => isCidr(v) && isIPv4(v.split('/')[0]!),
            'must be IPv4 addresses or CIDRs, comma separated',
          ),
      ),
    )
    .default([]),
  // Sandbox networking: the host ports raw TCP/UDP exposures take, where they listen, the host name
  // answered to clients (default: one apart from the console's, see rawConfig).
  NUBE_RAW_PORTS: z
    .string()
    .regex(/^\d{1,5}-\d{1,5}$/, 'must be a port range like 30000-30999')
    .refine((s) => {
      const [a, b] = s.split('-').map(Number) as [number, number];
      return a >= 1 && b <= 65535 && a <= b;
    }, 'must be a range of ports 1-65535, low-high')
    .default('30000-30999'),
  NUBE_RAW_BIND: z.string().min(1).optional(),
  NUBE_RAW_HOST: z.string().min(1).optional(),
  // The SSH gateway's port (0: any free one), listening on NUBE_RAW_BIND once a sandbox has SSH on.
  // DNS servers (ip or ip:port, comma separated) domain-verify asks for TXT records; empty: the host's.
  NUBE_DNS_SERVERS: csv.default([]),
  NUBE_SSH_PORT: z.coerce.number().int().min(0).max(65535).default(2222),
  // Web: the SearXNG instance web.search asks (absent: 503), fetch limits, where a 402 sends buyers.
  NUBE_WEB_SEARCH_URL: z
    .url({ protocol: /^https?$/, error: 'must be an http(s) URL of a SearXNG instance' })
    .optional(),
  NUBE_WEB_TIMEOUT_MS: z.coerce.number().int().min(100).max(120_000).default(15_000),
  NUBE_WEB_MAX_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(100 * 1024 * 1024)
    .default(5 * 1024 * 1024),
  NUBE_WEB_BUY_URL: z.url().optional(),
  // Documents and websites: the host sites answer under, and the browser the PDF export drives.
  NUBE_SITES_HOST: z
    .string()
    .regex(/^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/, 'must be a lowercase host name')
    .optional(),
  NUBE_FORMS_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(10),
  NUBE_CHROMIUM_PATH: z.string().min(1).default('/usr/bin/chromium'),
  NUBE_PDF_PAGES: z.coerce.number().int().min(1).max(32).default(2),
  NUBE_PDF_MAX_MEMORY_MB: z.coerce.number().int().min(64).max(65_536).default(1024),
  NUBE_PDF_TIMEOUT_MS: z.coerce.number().int().min(1000).max(300_000).default(30_000),
  // LLM gateway: the operator's OpenAI-compatible upstream (used when an account has no AI key of its
  // own), and the port of the gateway on the sandbox bridge's host address (0: any free port).
  NUBE_LLM_BASE_URL: z
    .url({
      protocol: /^https?$/,
      error: 'must be an http(s) URL (an OpenAI-compatible base, e.g. https://api.openai.com/v1)',
    })
    .optional(),
  NUBE_LLM_API_KEY: z.string().min(1).optional(),
  NUBE_LLM_MODEL: z.string().min(1).default('gpt-4o-mini'),
  NUBE_LLM_GATEWAY_PORT: z.coerce.number().int().min(0).max(65535).default(7071),
  NUBE_BOX_API_PORT: z.coerce.number().int().min(0).max(65535).default(7072),
  // Databases: the executor pool (processes running user SQL). Unset: derived from the cores (README).
  NUBE_DATABASE_EXECUTORS_MIN: z.coerce.number().int().min(1).max(256).optional(),
  NUBE_DATABASE_EXECUTORS_MAX: z.coerce.number().int().min(1).max(1024).optional(),
  NUBE_DATABASE_EXECUTORS_PER_OWNER: z.coerce.number().int().min(1).max(1024).optional(),
  NUBE_DATABASE_QUEUE_PER_OWNER: z.coerce.number().int().min(1).max(1_000_000).default(1000),
  NUBE_DATABASE_EXECUTOR_IDLE_MS: z.coerce.number().int().min(100).max(86_400_000).default(30_000),
  NUBE_DATABASE_QUEUE_WAIT_MS: z.coerce.number().int().min(100).max(86_400_000).default(60_000),
  NUBE_DATABASE_SHIP_MS: z.coerce.number().int().min(20).max(3_600_000).default(1000),
  // Fault injection for the crash-safety test only: the process kills itself (SIGKILL) at that step.
  NUBE_DATABASE_SHIP_FAULT: z.enum(['after-segment-upload', 'after-snapshot-upload']).optional(),
  // libSQL (Hrana over HTTP): idle expiry of a stream's baton, and open streams per owner.
  NUBE_LIBSQL_STREAM_IDLE_MS: z.coerce.number().int().min(100).max(3_600_000).default(10_000),
  NUBE_LIBSQL_STREAMS_PER_OWNER: z.coerce.number().int().min(1).max(10_000).default(64),
  // Fleet: boxes on this host (all fleets), spare boxes built ahead per fleet agent (a box serves one
  // conversation), queued turns per box, idle seconds before a box is removed, transcript trimming, and
  // messages carried to a new box.
  NUBE_FLEET_MAX_BOXES: z.coerce.number().int().min(1).max(10_000).default(20),
  NUBE_FLEET_SPARE_BOXES: z.coerce.number().int().min(0).max(64).default(1),
  NUBE_FLEET_QUEUE_FACTOR: z.coerce.number().min(0).max(100).default(1),
  NUBE_FLEET_IDLE_SECONDS: z.coerce
    .number()
    .int()
    .min(1)
    .max(86_400 * 7)
    .default(600),
  NUBE_FLEET_TRANSCRIPT_MAX_MESSAGES: z.coerce.number().int().min(2).max(10_000_000).default(20_000),
  NUBE_FLEET_TRANSCRIPT_MAX_DAYS: z.coerce.number().min(0.0001).max(3650).default(90),
  NUBE_FLEET_CARRY_MESSAGES: z.coerce.number().int().min(0).max(1000).default(50),
  NUBE_TELEGRAM_API_URL: z.url({ protocol: /^https?$/ }).default('https://api.telegram.org'),
  // OpenTelemetry traces (platform/tracing.ts): off unless a collector's OTLP/HTTP endpoint is set.
  OTEL_EXPORTER_OTLP_ENDPOINT: z
    .string()
    .url()
    .refine((v) => /^https?:\/\//.test(v), 'must be an http(s) URL')
    .optional(),
  OTEL_SERVICE_NAME: z.string().min(1).max(100).default('nube'),
  // GET /metrics (Prometheus text): off unless one of these is set.
  NUBE_METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  NUBE_METRICS_PUBLIC: bool.default(false),
  // Machines: who confirms the built-in checkout page, how often data paths are backed up.
  NUBE_CHECKOUT_OPERATOR_KEY: z.string().min(16, 'must be at least 16 characters').optional(),
  NUBE_MACHINE_BACKUP_INTERVAL_S: z.coerce
    .number()
    .int()
    .min(5)
    .max(7 * 86_400)
    .default(86_400),
  NUBE_MACHINE_BACKUP_KEEP_DAYS: z.coerce.number().int().min(1).max(365).default(7),
  NUBE_MACHINE_START_TIMEOUT_S: z.coerce.number().int().min(2).max(3600).default(60),
  NUBE_EXTRA_CA_BUNDLE: z.string().min(1).optional(),
  // Payment links: Stripe Checkout when a secret key is set (and its webhook's signing secret), else
  // nube's own checkout page confirmed with NUBE_CHECKOUT_OPERATOR_KEY.
  NUBE_STRIPE_SECRET_KEY: z
    .string()
    .regex(
      /^(sk|rk)_(test|live)_[A-Za-z0-9]+$/,
      'must be a Stripe secret or restricted key (sk_live_..., sk_test_...)',
    )
    .optional(),
  NUBE_STRIPE_WEBHOOK_SECRET: z
    .string()
    .regex(/^whsec_[A-Za-z0-9+/=]+$/, "must be the webhook endpoint's signing secret (whsec_...)")
    .optional(),
  NUBE_STRIPE_API_URL: z.url({ protocol: /^https?$/ }).default('https://api.stripe.com'),
  // HTTPS: the listener's port, a certificate given as files, the ACME CA for custom domains.
  NUBE_HTTPS_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  NUBE_TLS_CERT_FILE: z.string().min(1).optional(),
  NUBE_TLS_KEY_FILE: z.string().min(1).optional(),
  NUBE_ACME_DIRECTORY_URL: z
    .url({ protocol: /^https?$/, error: 'must be the http(s) URL of an ACME directory' })
    .optional(),
  NUBE_ACME_CA_BUNDLE: z.string().min(1).optional(),
  NUBE_ACME_EMAIL: z.email().optional(),
  NUBE_TLS_RENEW_BEFORE_DAYS: z.coerce.number().int().min(1).max(80).default(30),
  NUBE_TLS_RENEW_CHECK_S: z.coerce
    .number()
    .int()
    .min(1)
    .default(12 * 3600),
  // Many hosts: this node's id, role, internal address, heartbeat period, and when a silent node is down.
  NUBE_NODE_ID: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be lowercase letters, digits and dashes')
    .optional(),
  NUBE_NODE_ROLE: z.enum(['worker', 'api']).default('worker'),
  NUBE_NODE_ADDRESS: z
    .url({ protocol: /^https?$/, error: 'must be the http(s) base URL other replicas reach this node at' })
    .optional(),
  NUBE_NODE_HEARTBEAT_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  NUBE_NODE_DOWN_AFTER_MS: z.coerce.number().int().min(300).max(86_400_000).default(30_000),
});

export type Env = z.input<typeof envSchema>;

/** Every environment variable the configuration reads (what a service's environment file carries). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(envSchema.shape);

export class ConfigError extends Error {}

/** Parses an environment into a Config; throws ConfigError naming the offending variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(cleaned);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n  ${lines.join('\n  ')}`);
  }
  const e = parsed.data;
  const dataDir = resolve(e.NUBE_DATA_DIR);
  return {
    host: e.NUBE_HOST,
    port: e.NUBE_PORT,
    dataDir,
    publicUrl: (e.NUBE_PUBLIC_URL ?? `http://${e.NUBE_HOST}:${e.NUBE_PORT}`).replace(/\/$/, ''),
    publicUrlFixed: e.NUBE_PUBLIC_URL !== undefined,
    databaseUrl: e.DATABASE_URL,
    redisUrl: e.REDIS_URL,
    ownerKey: e.NUBE_OWNER_KEY,
    ownerPlan: e.NUBE_OWNER_PLAN,
    secret: e.NUBE_SECRET ?? readOrCreateSecret(dataDir),
    logLevel: e.NUBE_LOG_LEVEL,
    bodyLimitBytes: e.NUBE_BODY_LIMIT_BYTES,
    rateLimitPerMinute: e.NUBE_RATE_LIMIT_PER_MINUTE,
    rateLimits: {
      sandboxCreate: {
        byte: e.NUBE_SANDBOX_CREATE_PER_MINUTE_BYTE ?? e.NUBE_SANDBOX_CREATE_PER_MINUTE,
        mega: e.NUBE_SANDBOX_CREATE_PER_MINUTE_MEGA ?? e.NUBE_SANDBOX_CREATE_PER_MINUTE,
        tera: e.NUBE_SANDBOX_CREATE_PER_MINUTE_TERA ?? e.NUBE_SANDBOX_CREATE_PER_MINUTE,
      },
    },
    authCacheMs: e.NUBE_AUTH_CACHE_MS,
    audit: e.NUBE_AUDIT,
    auditRefusalWindowMs: e.NUBE_AUDIT_REFUSAL_WINDOW_S * 1000,
    jobPollMs: e.NUBE_JOB_POLL_MS,
    runWorkers: e.NUBE_WORKERS,
    shutdownGraceMs: e.NUBE_SHUTDOWN_GRACE_MS,
    outboundAllow: e.NUBE_OUTBOUND_ALLOW,
    templates: {
      registryAllow: e.NUBE_TEMPLATE_REGISTRY_ALLOW,
      maxBytes: e.NUBE_TEMPLATE_MAX_BYTES,
      blobDir: join(dataDir, 'oci'),
    },
    trustProxy: e.NUBE_TRUST_PROXY,
    webhookTimeoutMs: e.NUBE_WEBHOOK_TIMEOUT_MS,
    webhookRetryMs: e.NUBE_WEBHOOK_RETRY_SCHEDULE.map(durationMs),
    files: filesConfig(e, dataDir),
    sandboxes: {
      driver: e.NUBE_SANDBOX_DRIVER,
      publicHost: e.NUBE_SANDBOX_PUBLIC_HOST,
      templatesDir: resolve(e.NUBE_TEMPLATES_DIR ?? join(dataDir, 'templates')),
      prebuild: e.NUBE_SANDBOX_PREBUILD,
      bridge: { name: e.NUBE_SANDBOX_BRIDGE.split(':')[0]!, cidr: e.NUBE_SANDBOX_BRIDGE.split(':')[1]! },
      cgroupParent: e.NUBE_SANDBOX_CGROUP,
      cgroups: e.NUBE_SANDBOX_CGROUPS,
      favorDynmods: e.NUBE_SANDBOX_FAVOR_DYNMODS === 'true',
      mirror: e.NUBE_SANDBOX_MIRROR,
      store: e.NUBE_SANDBOX_STORE,
      storeSizeBytes: e.NUBE_SANDBOX_STORE_SIZE,
      storeReserveBytes: Math.round(e.NUBE_STORE_RESERVE_GB * 1024 ** 3),
      pool: {
        size: e.NUBE_SANDBOX_POOL,
        max: Math.max(e.NUBE_SANDBOX_POOL, e.NUBE_SANDBOX_POOL_MAX),
        memoryPercent: e.NUBE_SANDBOX_POOL_MEMORY_PERCENT,
      },
      memoryHoldMs: Math.round(e.NUBE_SANDBOX_MEMORY_HOLD_MINUTES * 60_000),
      raw: rawConfig(e),
      privateAllow: privateAllow(e),
      sshPort: e.NUBE_SSH_PORT,
      dnsServers: e.NUBE_DNS_SERVERS,
    },
    web: {
      searchUrl: e.NUBE_WEB_SEARCH_URL?.replace(/\/$/, ''),
      timeoutMs: e.NUBE_WEB_TIMEOUT_MS,
      maxBytes: e.NUBE_WEB_MAX_BYTES,
      buyUrl: e.NUBE_WEB_BUY_URL,
    },
    sites: { host: e.NUBE_SITES_HOST ?? defaultSitesHost(e.NUBE_PUBLIC_URL) },
    forms: { perMinute: e.NUBE_FORMS_PER_MINUTE },
    pdf: {
      chromiumPath: e.NUBE_CHROMIUM_PATH,
      pages: e.NUBE_PDF_PAGES,
      maxMemoryBytes: e.NUBE_PDF_MAX_MEMORY_MB * 1024 * 1024,
      timeoutMs: e.NUBE_PDF_TIMEOUT_MS,
    },
    llm: {
      upstream: e.NUBE_LLM_BASE_URL
        ? {
            baseUrl: e.NUBE_LLM_BASE_URL.replace(/\/$/, ''),
            apiKey: e.NUBE_LLM_API_KEY,
            model: e.NUBE_LLM_MODEL,
          }
        : undefined,
      gatewayPort: e.NUBE_LLM_GATEWAY_PORT,
    },
    boxApiPort: e.NUBE_BOX_API_PORT,
    metrics: metricsConfig(e),
    tracing: { endpoint: e.OTEL_EXPORTER_OTLP_ENDPOINT, serviceName: e.OTEL_SERVICE_NAME },
    databases: databasesConfig(e),
    machines: {
      checkoutOperatorKey: e.NUBE_CHECKOUT_OPERATOR_KEY,
      backupIntervalMs: e.NUBE_MACHINE_BACKUP_INTERVAL_S * 1000,
      backupKeepMs: e.NUBE_MACHINE_BACKUP_KEEP_DAYS * 86_400_000,
      startTimeoutMs: e.NUBE_MACHINE_START_TIMEOUT_S * 1000,
      extraCaBundle: e.NUBE_EXTRA_CA_BUNDLE ? resolve(e.NUBE_EXTRA_CA_BUNDLE) : undefined,
    },
    payments: {
      stripe: e.NUBE_STRIPE_SECRET_KEY
        ? {
            secretKey: e.NUBE_STRIPE_SECRET_KEY,
            webhookSecret: e.NUBE_STRIPE_WEBHOOK_SECRET,
            apiUrl: e.NUBE_STRIPE_API_URL,
          }
        : undefined,
    },
    tls: {
      httpsPort: e.NUBE_HTTPS_PORT,
      certFile: e.NUBE_TLS_CERT_FILE ? resolve(e.NUBE_TLS_CERT_FILE) : undefined,
      keyFile: e.NUBE_TLS_KEY_FILE ? resolve(e.NUBE_TLS_KEY_FILE) : undefined,
      acmeDirectoryUrl: e.NUBE_ACME_DIRECTORY_URL,
      acmeCaBundle: e.NUBE_ACME_CA_BUNDLE ? resolve(e.NUBE_ACME_CA_BUNDLE) : undefined,
      acmeEmail: e.NUBE_ACME_EMAIL,
      renewBeforeMs: e.NUBE_TLS_RENEW_BEFORE_DAYS * 86_400_000,
      renewCheckMs: e.NUBE_TLS_RENEW_CHECK_S * 1000,
    },
    fleet: {
      maxBoxes: e.NUBE_FLEET_MAX_BOXES,
      spareBoxes: e.NUBE_FLEET_SPARE_BOXES,
      queueFactor: e.NUBE_FLEET_QUEUE_FACTOR,
      idleMs: e.NUBE_FLEET_IDLE_SECONDS * 1000,
      transcriptMaxMessages: e.NUBE_FLEET_TRANSCRIPT_MAX_MESSAGES,
      transcriptMaxAgeMs: e.NUBE_FLEET_TRANSCRIPT_MAX_DAYS * 86_400_000,
      carryMessages: e.NUBE_FLEET_CARRY_MESSAGES,
      telegramApiUrl: e.NUBE_TELEGRAM_API_URL.replace(/\/$/, ''),
    },
    nodes: nodesConfig(e, dataDir),
    backupS3: {
      endpoint: e.NUBE_S3_ENDPOINT,
      region: e.NUBE_S3_REGION,
      forcePathStyle: e.NUBE_S3_FORCE_PATH_STYLE,
      credentials:
        e.NUBE_S3_ACCESS_KEY_ID && e.NUBE_S3_SECRET_ACCESS_KEY
          ? { accessKeyId: e.NUBE_S3_ACCESS_KEY_ID, secretAccessKey: e.NUBE_S3_SECRET_ACCESS_KEY }
          : undefined,
    },
  };
}

function nodesConfig(e: z.infer<typeof envSchema>, dataDir: string): NodesConfig {
  if (e.NUBE_NODE_DOWN_AFTER_MS <= e.NUBE_NODE_HEARTBEAT_MS) {
    throw new ConfigError(
      'NUBE_NODE_DOWN_AFTER_MS must be longer than NUBE_NODE_HEARTBEAT_MS (a few heartbeats)',
    );
  }
  return {
    // Stable across restarts without a file: the host name and the data directory name the node.
    id:
      e.NUBE_NODE_ID ??
      `node-${createHash('sha256').update(`${hostname()}\0${dataDir}`).digest('hex').slice(0, 12)}`,
    role: e.NUBE_NODE_ROLE,
    address: e.NUBE_NODE_ADDRESS?.replace(/\/$/, ''),
    heartbeatMs: e.NUBE_NODE_HEARTBEAT_MS,
    downAfterMs: e.NUBE_NODE_DOWN_AFTER_MS,
  };
}

function databasesConfig(e: z.infer<typeof envSchema>): DatabasesConfig {
  const min = e.NUBE_DATABASE_EXECUTORS_MIN;
  const max = e.NUBE_DATABASE_EXECUTORS_MAX;
  if (min !== undefined && max !== undefined && max < min) {
    throw new ConfigError('NUBE_DATABASE_EXECUTORS_MAX must be at least NUBE_DATABASE_EXECUTORS_MIN');
  }
  return {
    executorsMin: min,
    executorsMax: max,
    executorsPerOwner: e.NUBE_DATABASE_EXECUTORS_PER_OWNER,
    queuePerOwner: e.NUBE_DATABASE_QUEUE_PER_OWNER,
    executorIdleMs: e.NUBE_DATABASE_EXECUTOR_IDLE_MS,
    queueWaitMs: e.NUBE_DATABASE_QUEUE_WAIT_MS,
    libsqlStreamIdleMs: e.NUBE_LIBSQL_STREAM_IDLE_MS,
    libsqlStreamsPerOwner: e.NUBE_LIBSQL_STREAMS_PER_OWNER,
    shipMs: e.NUBE_DATABASE_SHIP_MS,
    shipFault: e.NUBE_DATABASE_SHIP_FAULT,
  };
}

/** An IPv4 or IPv6 address, optionally with a prefix length. */
function isCidr(v: string): boolean {
  try {
    parseAllowList([v]);
    return true;
  } catch {
    return false;
  }
}

/** A public URL's host when it is a name (not an address, not localhost). */
function publicHostName(publicUrl: string | undefined): string | undefined {
  const host = publicUrl ? new URL(publicUrl).hostname.toLowerCase() : '';
  return /[a-z]/.test(host) && !host.includes(':') && host !== 'localhost' ? host : undefined;
}

const isLoopback = (host: string) => host === 'localhost' || host === '::1' || /^127\./.test(host);
const isWildcard = (bind: string) => bind === '0.0.0.0' || bind === '::';

/**
 * Raw ports are tenants' servers, and a browser sends a host's cookies to every port of that host: they
 * never share the console's host. A loopback nube puts them on a loopback address of their own
 * (127.0.0.2), a named public URL announces them as `raw.<name>`; NUBE_RAW_HOST naming the console's
 * own host is refused. (Raw ports on every address, NUBE_RAW_BIND=0.0.0.0, share every host name: the
 * console then signs in over HTTPS only, see the console area.)
 */
function rawConfig(e: z.infer<typeof envSchema>) {
  const bind =
    e.NUBE_RAW_BIND ??
    (isLoopback(e.NUBE_HOST) ? (e.NUBE_HOST === '127.0.0.2' ? '127.0.0.3' : '127.0.0.2') : e.NUBE_HOST);
  const named = publicHostName(e.NUBE_PUBLIC_URL);
  const consoleHost = (e.NUBE_PUBLIC_URL ? new URL(e.NUBE_PUBLIC_URL).hostname : e.NUBE_HOST)
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  if (e.NUBE_RAW_HOST !== undefined && e.NUBE_RAW_HOST.toLowerCase() === consoleHost) {
    throw new ConfigError(
      `NUBE_RAW_HOST: ${e.NUBE_RAW_HOST} is the console's host, and a browser sends the console's cookie to every port of its host; ` +
        'give raw ports a host name of their own (e.g. raw.<your domain>) and, where you can, an address of their own (NUBE_RAW_BIND)',
    );
  }
  const host = e.NUBE_RAW_HOST ?? (named ? `raw.${named}` : isWildcard(bind) ? consoleHost : bind);
  return {
    first: Number(e.NUBE_RAW_PORTS.split('-')[0]),
    last: Number(e.NUBE_RAW_PORTS.split('-')[1]),
    bind,
    host,
  };
}

/** Ranges the operator lets sandboxes open; never the bridge itself (the host and the other sandboxes). */
function privateAllow(e: z.infer<typeof envSchema>): string[] {
  const bridge = e.NUBE_SANDBOX_BRIDGE.split(':')[1]!;
  const bad = e.NUBE_SANDBOX_PRIVATE_ALLOW.find((entry) => cidrsOverlap(entry, bridge));
  if (bad)
    throw new ConfigError(
      `NUBE_SANDBOX_PRIVATE_ALLOW: ${bad} overlaps the sandbox bridge ${bridge} (the host and the other sandboxes are never reachable)`,
    );
  return e.NUBE_SANDBOX_PRIVATE_ALLOW;
}

/**
 * `sites.<public host name>` when the public URL names a host, else `sites.localhost` (browsers and
 * curl resolve every `*.localhost` to loopback, so sites work on one machine without DNS).
 */
function defaultSitesHost(publicUrl: string | undefined): string {
  const named = publicHostName(publicUrl);
  return named ? `sites.${named}` : 'sites.localhost';
}

function metricsConfig(e: z.infer<typeof envSchema>): MetricsConfig {
  if (e.NUBE_METRICS_TOKEN && e.NUBE_METRICS_PUBLIC) {
    throw new ConfigError(
      'NUBE_METRICS_TOKEN and NUBE_METRICS_PUBLIC: set one (a token, or a public /metrics), not both',
    );
  }
  if (e.NUBE_METRICS_TOKEN) return { mode: 'token', token: e.NUBE_METRICS_TOKEN };
  return e.NUBE_METRICS_PUBLIC ? { mode: 'public' } : { mode: 'off' };
}

function filesConfig(e: z.infer<typeof envSchema>, dataDir: string): FilesConfig {
  const ai = e.NUBE_FILES_AI_KEY
    ? {
        baseUrl: e.NUBE_FILES_AI_BASE_URL.replace(/\/$/, ''),
        apiKey: e.NUBE_FILES_AI_KEY,
        model: e.NUBE_FILES_AI_MODEL,
      }
    : undefined;
  if (e.NUBE_BLOB_BACKEND === 'local') {
    const root = resolve(e.NUBE_BLOB_DIR ?? join(dataDir, 'blobs'));
    const dirs = Object.fromEntries(FILE_REGION_NAMES.map((r) => [r, join(root, r.toLowerCase())]));
    return {
      blob: { backend: 'local', dirs: dirs as Record<(typeof FILE_REGION_NAMES)[number], string> },
      ai,
    };
  }
  const perRegion = { LATAM: e.NUBE_S3_BUCKET_LATAM, US: e.NUBE_S3_BUCKET_US, EU: e.NUBE_S3_BUCKET_EU };
  const buckets = Object.fromEntries(
    FILE_REGION_NAMES.map((r) => {
      const own = perRegion[r];
      if (own) return [r, { bucket: own }];
      if (!e.NUBE_S3_BUCKET)
        throw new ConfigError(`NUBE_BLOB_BACKEND=s3 needs NUBE_S3_BUCKET or NUBE_S3_BUCKET_${r}`);
      return [r, { bucket: e.NUBE_S3_BUCKET, prefix: `${r.toLowerCase()}/` }];
    }),
  ) as Record<(typeof FILE_REGION_NAMES)[number], { bucket: string; prefix?: string }>;
  const credentials =
    e.NUBE_S3_ACCESS_KEY_ID && e.NUBE_S3_SECRET_ACCESS_KEY
      ? { accessKeyId: e.NUBE_S3_ACCESS_KEY_ID, secretAccessKey: e.NUBE_S3_SECRET_ACCESS_KEY }
      : undefined;
  return {
    blob: {
      backend: 's3',
      endpoint: e.NUBE_S3_ENDPOINT,
      region: e.NUBE_S3_REGION,
      forcePathStyle: e.NUBE_S3_FORCE_PATH_STYLE,
      credentials,
      buckets,
    },
    ai,
  };
}

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;
function durationMs(text: string): number {
  const m = /^(\d+)(ms|s|m|h)?$/.exec(text)!;
  return Number(m[1]) * UNIT_MS[(m[2] ?? 'ms') as keyof typeof UNIT_MS];
}

// A single node keeps its signing/encryption secret in the data dir; replicas share NUBE_SECRET.
function readOrCreateSecret(dataDir: string): string {
  const file = join(dataDir, 'secret.key');
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(32).toString('base64url');
  writeFileSync(file, `${secret}\n`, { mode: 0o600, flag: 'wx' });
  return secret;
}
