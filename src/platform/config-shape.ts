// The shape of nube's configuration: what src/config.ts reads once from the environment and the platform
// hands every area (deps.config). Areas import this shape, never the module that reads the environment.
import type { PlanName } from './plans.js';
import type { TracingConfig } from './tracing.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  /** Base URL clients reach nube at; without NUBE_PUBLIC_URL it is the listen address, known after listen. */
  publicUrl: string;
  publicUrlFixed: boolean;
  databaseUrl?: string;
  redisUrl?: string;
  ownerKey?: string;
  ownerPlan: PlanName;
  secret: string;
  logLevel: LogLevel;
  bodyLimitBytes: number;
  rateLimitPerMinute: number;
  /** Operator settings that replace an operation's own rate (RateLimitRule.setting), per plan. */
  rateLimits: RateLimitSettings;
  authCacheMs: number;
  /** Record every mutating call and refused credential in the audit log (NUBE_AUDIT, default on). */
  audit: boolean;
  /** Window of the aggregation of unknown credentials' refusals per address (NUBE_AUDIT_REFUSAL_WINDOW_S). */
  auditRefusalWindowMs: number;
  jobPollMs: number;
  runWorkers: boolean;
  /** On stop, how long open responses and leased jobs get before connections are cut and jobs released. */
  shutdownGraceMs: number;
  outboundAllow: string[];
  templates: TemplatesConfig;
  /** Reverse proxies (addresses or CIDRs) whose X-Forwarded-* headers are believed (NUBE_TRUST_PROXY). */
  trustProxy: string[];
  webhookTimeoutMs: number;
  /** Milliseconds to wait before retry 1, 2, ...; a delivery gets 1 + length attempts. */
  webhookRetryMs: number[];
  files: FilesConfig;
  sandboxes: SandboxesConfig;
  web: WebConfig;
  sites: { host: string };
  /** Forms on sites: submissions one client address may make per minute (NUBE_FORMS_PER_MINUTE). */
  forms: { perMinute: number };
  pdf: PdfConfig;
  llm: LlmConfig;
  /** Port of the box API listener on the sandbox bridge's host address (minted keys' NUBE_BASE_URL); 0: any free one. */
  boxApiPort: number;
  metrics: MetricsConfig;
  tracing: TracingConfig;
  databases: DatabasesConfig;
  machines: MachinesConfig;
  payments: PaymentsConfig;
  fleet: FleetConfig;
  tls: TlsConfig;
  nodes: NodesConfig;
  /** The S3-compatible service `nube backup --to s3://...` writes to (the NUBE_S3_* connection). */
  backupS3: { endpoint?: string; region: string; forcePathStyle: boolean; credentials?: { accessKeyId: string; secretAccessKey: string } };
}

export type RateLimitSettings = Record<'sandboxCreate', Record<PlanName, number>>;

/** HTTPS: nube's own listener, the certificates it serves, and the ACME CA it gets them from. */
export interface TlsConfig {
  /** Port of the HTTPS listener (NUBE_HTTPS_PORT, 0: any free one); unset: no HTTPS. */
  httpsPort?: number;
  /** A certificate (and its key) given as PEM files, e.g. a wildcard for `*.<public host>`. */
  certFile?: string;
  keyFile?: string;
  /** The ACME directory custom domains get certificates from; unset: no certificates are requested. */
  acmeDirectoryUrl?: string;
  /** PEM bundle trusted for the ACME directory's TLS only (a test CA such as pebble's). */
  acmeCaBundle?: string;
  acmeEmail?: string;
  /** A certificate is renewed this long before it expires. */
  renewBeforeMs: number;
  /** How often the durable renewal job looks for certificates to renew. */
  renewCheckMs: number;
}

/** This process as a node of a many-host nube (platform/nodes.ts). */
export interface NodesConfig {
  /** Stable id (NUBE_NODE_ID, else generated once into the data directory). */
  id: string;
  /** `worker` holds sandboxes and databases; `api` holds none and relays every such request. */
  role: 'worker' | 'api';
  /** Base URL other replicas reach this node at; unset: the listen address. */
  address?: string;
  heartbeatMs: number;
  /** A node whose last heartbeat is older than this is down. */
  downAfterMs: number;
}

/** The executor pool of user databases; unset counts are derived from the cores by the engine. */
export interface DatabasesConfig {
  /** Processes kept running (the pool's minimum). */
  executorsMin?: number;
  /** Upper bound of the pool. */
  executorsMax?: number;
  /** Executors one owner's requests may hold at once. */
  executorsPerOwner?: number;
  /** Requests one owner may have waiting for an executor; more answer 429. */
  queuePerOwner: number;
  /** Executors beyond the minimum idle this long are ended. */
  executorIdleMs: number;
  /** A request waiting this long for an executor answers 503 without having run. */
  queueWaitMs: number;
  /** A libSQL (Hrana) stream unused this long is closed, rolling back its open transaction. */
  libsqlStreamIdleMs: number;
  /** libSQL streams (batons) one owner may hold open at once. */
  libsqlStreamsPerOwner: number;
  /**
   * A changed database is copied to the blob store at most this often (ms); a node's death can lose
   * the writes of about this long plus one copy's time (databases/copies.ts).
   */
  shipMs: number;
  /** Tests only: SIGKILL at a step of shipping (crash-safety test). */
  shipFault?: 'after-segment-upload' | 'after-snapshot-upload';
}

export interface MachinesConfig {
  /** Key the operator types on the built-in checkout page to confirm a payment; unset: nobody can. */
  checkoutOperatorKey?: string;
  backupIntervalMs: number;
  backupKeepMs: number;
  /** How long a (re)started app has to answer its health check before it counts as not serving. */
  startTimeoutMs: number;
  /** PEM bundle of extra CAs machine boxes trust (an operator behind a TLS-inspecting proxy). */
  extraCaBundle?: string;
}

/** The payment provider behind payment links: Stripe Checkout when configured, else nube's own page. */
export interface PaymentsConfig {
  stripe?: {
    secretKey: string;
    /** Signing secret of the Stripe webhook endpoint pointed at `/payments/stripe/webhook`; unset: payments are never confirmed. */
    webhookSecret?: string;
    /** Stripe's API (a local server speaking it in tests). */
    apiUrl: string;
  };
}

/** The fleet's pool and conversation store. */
export interface FleetConfig {
  maxBoxes: number;
  /** Boxes built ahead per active fleet agent (within its capacity), each for one new conversation. */
  spareBoxes: number;
  /** Turns that may wait, per running slot of a fleet agent; beyond: 503 FleetFull. */
  queueFactor: number;
  idleMs: number;
  transcriptMaxMessages: number;
  transcriptMaxAgeMs: number;
  carryMessages: number;
  /** Telegram's Bot API base (a local server speaking it in tests). */
  telegramApiUrl: string;
}

/** The warm browser behind the PDF export. */
export interface PdfConfig {
  /** Debian's launcher (`/usr/bin/chromium`). */
  chromiumPath: string;
  /** Pages rendering at once. */
  pages: number;
  /** The browser restarts (once idle) past this much memory (PSS) over all its processes. */
  maxMemoryBytes: number;
  timeoutMs: number;
}

/** The operator's LLM upstream (absent: only accounts with their own AI key can run agents). */
export interface LlmConfig {
  upstream?: { baseUrl: string; apiKey?: string; model: string };
  /** Port of the gateway listener on the sandbox bridge's host address; 0 picks a free one. */
  gatewayPort: number;
}

/**
 * GET /metrics: `off` (no route, no per-request cost), `token` (Bearer NUBE_METRICS_TOKEN) or `public`
 * (no credential: for a port only the scraper reaches).
 */
export type MetricsConfig = { mode: 'off' } | { mode: 'public' } | { mode: 'token'; token: string };

/** web.search provider, limits of one page fetch, and the `buy` link of a 402. */
export interface WebConfig {
  /** SearXNG base URL (its JSON API at `<base>/search?format=json`); absent: search answers 503. */
  searchUrl?: string;
  timeoutMs: number;
  maxBytes: number;
  /** Absent: `<public URL>/api/v2/account/usage`. */
  buyUrl?: string;
}

export const FILE_REGION_NAMES = ['LATAM', 'US', 'EU'] as const;

/** Where each region's blobs live, and the embeddings endpoint for semantic search (absent: no AI key). */
export interface FilesConfig {
  blob:
    | { backend: 'local'; dirs: Record<(typeof FILE_REGION_NAMES)[number], string> }
    | {
        backend: 's3';
        endpoint?: string;
        region: string;
        forcePathStyle: boolean;
        credentials?: { accessKeyId: string; secretAccessKey: string };
        /** Region -> bucket and key prefix (one shared bucket gets a `<region>/` prefix per region). */
        buckets: Record<(typeof FILE_REGION_NAMES)[number], { bucket: string; prefix?: string }>;
      };
  ai?: { baseUrl: string; apiKey: string; model: string };
}

/** Templates made from images and Dockerfiles (areas/templates). */
export interface TemplatesConfig {
  /** Registry origins reached although private (NUBE_TEMPLATE_REGISTRY_ALLOW); `http://` ones in plain HTTP. */
  registryAllow: string[];
  /** What one template may unpack to, bytes of file content (NUBE_TEMPLATE_MAX_BYTES). */
  maxBytes: number;
  /** Image blobs (layers, configs) kept by digest. */
  blobDir: string;
}

export interface SandboxesConfig {
  /** namespaces (bwrap + user namespaces) or gvisor (runsc, a user-space kernel). */
  driver: 'namespaces' | 'gvisor';
  /** Per-port URLs are `<port>-<sandbox id>.<publicHost>`. */
  publicHost: string;
  templatesDir: string;
  /** Built-in templates built when the server starts (NUBE_SANDBOX_PREBUILD=base,code-interpreter). */
  prebuild: string[];
  bridge: { name: string; cidr: string };
  cgroupParent: string;
  /** Which cgroup hierarchy sandboxes use (NUBE_SANDBOX_CGROUPS): detected, or forced. */
  cgroups: CgroupChoice;
  /** Turn the host's cgroup `favordynmods` on (NUBE_SANDBOX_FAVOR_DYNMODS, default true). */
  favorDynmods: boolean;
  /** Debian mirror template builds download from (NUBE_SANDBOX_MIRROR); mmdebstrap's default when unset. */
  mirror?: string;
  /** Upper dirs and snapshots on a reflink-capable store (`auto`) or plain copies (`copy`): NUBE_SANDBOX_STORE. */
  store: 'auto' | 'copy';
  /** Upper bound of the store image's size when nube makes one (NUBE_SANDBOX_STORE_SIZE); default what the host can spare. */
  storeSizeBytes?: number;
  /** Free space the host keeps (NUBE_STORE_RESERVE_GB, default 10): bounds a new store image; doctor and /metrics warn near it. */
  storeReserveBytes: number;
  /** Warm pool (NUBE_SANDBOX_POOL*): per template in use, sandboxes started ahead and handed out on create. */
  pool: SandboxPoolConfig;
  /** How long a sandbox suspended with its memory keeps it (NUBE_SANDBOX_MEMORY_HOLD_MINUTES, default 60), ms. */
  memoryHoldMs: number;
  /** Raw TCP/UDP exposures: host ports [first, last], listen address, host name clients are told. */
  raw: { first: number; last: number; bind: string; host: string };
  /** Private/loopback/link-local IPv4 ranges a network policy may open (NUBE_SANDBOX_PRIVATE_ALLOW); closed otherwise. */
  privateAllow: string[];
  /** SSH gateway port (0: any free port), on raw.bind, told to clients as raw.host. */
  sshPort: number;
  /** Servers domain-verify resolves TXT records with (ip or ip:port); empty: the host's resolver. */
  dnsServers: string[];
}

export interface SandboxPoolConfig {
  /** Sandboxes kept ready per template in use when creations are rare (0: no pool). */
  size: number;
  /** Upper bound per template when creations come fast. */
  max: number;
  /** Pooled sandboxes of all templates together take at most this share of the host's available memory. */
  memoryPercent: number;
}

export type CgroupChoice = 'auto' | 'v1' | 'v2';
