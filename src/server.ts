import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { Redis } from 'ioredis';
import { AREAS, createServices, operations } from './areas/index.js';
import { mountE2b } from './compat/e2b/index.js';
import type { PlatformDeps } from './areas/deps.js';
import type { Config } from './config.js';
import { Authenticator } from './platform/auth.js';
import { buildCatalog } from './platform/catalog.js';
import { SecretBox } from './platform/crypto.js';
import { type Bus, MemoryBus, RedisBus } from './platform/events.js';
import { createJobQueue } from './platform/jobs.js';
import { FlexibleRateLimiter, MemoryRateLimiter } from './platform/limits.js';
import { errors } from './platform/errors.js';
import { newId } from './platform/ids.js';
import { registerJobMetrics } from './platform/jobs-metrics.js';
import { mountMcp } from './platform/mcp.js';
import { ScopeCatalog } from './platform/scope-catalog.js';
import { boxReachGuard, holderAddress, ownsResource } from './areas/account/key-scope.js';
import { BoxApiListener } from './platform/box-api.js';
import { Metrics } from './platform/metrics.js';
import { installRequestMetrics, mountMetricsRoute, operationOf } from './platform/metrics-http.js';
import { installRequestTracing, startTracing } from './platform/tracing.js';
import { OutboundClient } from './platform/outbound.js';
import { Payments } from './platform/payments.js';
import { NodeForwarder } from './platform/node-forward.js';
import { ProxyTrust } from './platform/request-origin.js';
import { NodeRegistry } from './platform/nodes.js';
import { ALL_MIGRATIONS } from './migrations.js';
import { Outbox } from './platform/outbox.js';
import { WorkspaceRegistry } from './platform/workspaces.js';
import { buildOpenApi } from './platform/openapi.js';
import type { Services } from './platform/operation.js';
import { clientErrorHandler, frameworkErrors, installErrorHandling } from './platform/http-errors.js';
import { API_PREFIX, installBodyParsing, mountOperations } from './platform/rest.js';
import { HttpsListener } from './platform/https-listener.js';
import { Usage } from './platform/usage.js';
import { mountWebSockets } from './platform/websocket.js';
import { openStore } from './store/db.js';
import { migrateToLatest } from './store/migrate.js';
import { VERSION } from './version.js';

export interface Nube {
  app: FastifyInstance;
  deps: PlatformDeps;
  services: Services;
  /** The owner key to print once, when this start created the owner account with a generated key. */
  ownerKeyToPrint?: string;
  listen(): Promise<string>;
  close(): Promise<void>;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;
// Request ids: unique per process (random prefix) and across its requests (counter); cheaper than a UUID.
const REQ_PREFIX = randomUUID().slice(0, 8);
let reqCounter = 0;

/** Wires every dependency from the config, mounts the API and returns the server, not yet listening. */
export async function buildServer(config: Config): Promise<Nube> {
  const app = Fastify({
    logger: { level: config.logLevel, redact: ['req.headers.authorization', 'req.headers["x-api-key"]'] },
    bodyLimit: config.bodyLimitBytes,
    // One line per request from the onResponse hook below instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : `${REQ_PREFIX}-${(++reqCounter).toString(36)}`;
    },
    // With logging off, every request shares the server's logger instead of building a child per request.
    ...(config.logLevel === 'silent' ? { childLoggerFactory: (logger: FastifyBaseLogger) => logger } : {}),
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 500 },
    // Behind the operator's reverse proxy (NUBE_TRUST_PROXY) req.ip is the client's; no one else's
    // X-Forwarded-For counts.
    ...(config.trustProxy.length ? { trustProxy: config.trustProxy } : {}),
    // The HTTP layer's own errors leave in the API's one error shape (platform/http-errors.ts); so does
    // the 503 while closing (the onRequest hook below), which Fastify would write in its own.
    frameworkErrors,
    clientErrorHandler,
    return503OnClosing: false,
  });

  const store = openStore({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    traced: config.tracing.endpoint !== undefined,
    onIdleError: (err) => app.log.warn({ err }, 'idle PostgreSQL connection lost; it will be replaced'),
  });
  await migrateToLatest(store.db, ALL_MIGRATIONS);

  let redis: Redis | undefined;
  let bus: Bus = new MemoryBus();
  if (config.redisUrl) {
    redis = new Redis(config.redisUrl, {
      maxRetriesPerRequest: 2,
      enableOfflineQueue: true,
      lazyConnect: false,
    });
    bus = new RedisBus(redis, redis.duplicate());
  }
  let publicUrl = config.publicUrl;
  // Known once the HTTPS listener listens (its port may be 0: any free one).
  const publicIsHttps = config.publicUrl.startsWith('https:');
  let httpsUrl: string | null = publicIsHttps ? config.publicUrl : null;
  // Set once the services exist: whether nube's own listener can serve a name (a file certificate).
  let covers: (host: string) => boolean = () => false;
  const metrics = new Metrics((obj, msg) => app.log.warn(obj, msg));
  registerJobMetrics(metrics, store.db);
  const nodes = new NodeRegistry(store.db, config.nodes, { driver: config.sandboxes.driver, version: VERSION }, app.log);
  const proxyTrust = new ProxyTrust(config.trustProxy);
  const forwarder = new NodeForwarder(nodes, config.secret, proxyTrust);
  // Started on the first key minted into a box (platform/box-api.ts).
  let boxApi: Promise<BoxApiListener> | undefined;
  const deps: PlatformDeps = {
    publicUrl: () => publicUrl,
    boxApiUrl: async () => {
      boxApi ??= BoxApiListener.start(app, services.sandboxes.hostNetwork, config.boxApiPort).catch((e: unknown) => {
        boxApi = undefined;
        throw errors.unavailable(`the box API (a minted key's NUBE_BASE_URL) could not start on the sandbox bridge: ${(e as Error).message}`);
      });
      const b = await boxApi;
      await b.reassert().catch((e: unknown) => app.log.warn({ err: e }, 'could not re-open the box API port'));
      return b.url;
    },
    httpsUrl: (forHost) => (publicIsHttps || forHost === undefined || covers(forHost) ? httpsUrl : null),
    config,
    store,
    bus,
    events: new Outbox({ store, bus, log: app.log }),
    usage: new Usage(store.db),
    workspaces: new WorkspaceRegistry(),
    metrics,
    // A lease names the node holding it (`wrk_…@node`): after a node dies, which jobs wait out its leases.
    jobs: createJobQueue({ store, logger: app.log, pollIntervalMs: config.jobPollMs, workerId: `${newId('wrk')}@${config.nodes.id}` }),
    auth: new Authenticator(proxyTrust),
    rateLimiter: redis ? new FlexibleRateLimiter(redis) : new MemoryRateLimiter(),
    secretBox: new SecretBox(config.secret),
    outbound: new OutboundClient({ allow: config.outboundAllow }),
    payments: new Payments(config.payments, app.log),
    nodes,
    forwarder,
    redis,
    log: app.log,
  };
  // Cluster-wide like the job gauges (one table): aggregate with max across replicas.
  metrics.sampled('nube_outbox_backlog', 'Events committed and not yet fanned out to webhook deliveries', [], async () => [
    { value: await deps.events.backlog() },
  ]);
  const services = await createServices(deps);
  services.account.useCatalog(new ScopeCatalog(operations), ownsResource(services));
  services.sandboxes.core.reachGuard = boxReachGuard(services);
  deps.auth.holderAddress = holderAddress(services);
  forwarder.voucher = (req, box) => deps.auth.vouchBox({ authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] }, box);
  covers = (host) => services.domains.certificates.covers(host);
  const boot = await services.account.bootstrapOwner(config.ownerPlan, config.ownerKey);

  installBodyParsing(app);
  // Before the forwarder's hook: a request relayed to another node is in its span, and its traceparent
  // goes along (node-forward.ts injects the active context).
  const tracing = await startTracing(config.tracing, config.nodes.id);
  installRequestTracing(app, operationOf);
  let closing = false;
  app.addHook('onRequest', (_req, reply, done) => {
    if (!closing) return done();
    const e = errors.unavailable('nube is shutting down; retry on another replica or after it restarts');
    void reply.code(e.status).header('connection', 'close').send(e.toBody());
  });
  forwarder.install(app);
  app.addHook('onSend', (req, reply, payload, done) => {
    reply.header('x-request-id', req.id);
    // A response finishing during shutdown closes its keep-alive connection, or close() would wait on it.
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });
  if (['info', 'debug', 'trace'].includes(config.logLevel))
    app.addHook('onResponse', async (req, reply) => {
      req.log.info(
        {
          method: req.method,
          url: req.url.split('?')[0],
          status: reply.statusCode,
          ms: Math.round(reply.elapsedTime),
        },
        'request',
      );
    });
  installErrorHandling(app);
  if (config.metrics.mode !== 'off') {
    metrics.collectProcessMetrics();
    installRequestMetrics(app, metrics);
  }

  mountOperations(app, {
    operations,
    auth: deps.auth,
    rateLimiter: deps.rateLimiter,
    services,
    defaultRateLimit: { points: config.rateLimitPerMinute, windowSeconds: 60 },
    rateLimitSettings: config.rateLimits,
    forwarder,
    workspaces: deps.workspaces,
  });
  // Before the areas' routes: its port-host hook must run before the sandboxes' port proxy.
  mountE2b(app, services.sandboxes, services.volumes, deps, (ownerId) => services.account.planOf(ownerId), {
    templates: services.templates,
    stores: services.files?.stores,
  });
  mountWebSockets(app, {
    operations,
    auth: deps.auth,
    rateLimiter: deps.rateLimiter,
    services,
    defaultRateLimit: { points: config.rateLimitPerMinute, windowSeconds: 60 },
    rateLimitSettings: config.rateLimits,
    workspaces: deps.workspaces,
  });
  for (const area of AREAS) area.routes?.(app, services, deps);
  // Both documents are built on their first request (a quarter of a second of every start otherwise).
  let openapi: ReturnType<typeof buildOpenApi> | undefined;
  let catalog: ReturnType<typeof buildCatalog> | undefined;
  app.get(`${API_PREFIX}/openapi.json`, async () => (openapi ??= buildOpenApi(operations, { title: 'nube', version: VERSION, serverUrl: config.publicUrl })));
  app.get('/api/tools.json', async () => (catalog ??= buildCatalog(operations)));
  app.get('/healthz', async () => {
    await store.db.selectFrom('accounts').select('id').limit(1).execute();
    return { ok: true, version: VERSION };
  });
  mountMcp(app, operations, deps.auth, VERSION);
  mountMetricsRoute(app, metrics, config.metrics);
  const https = config.tls.httpsPort === undefined ? null : new HttpsListener(app, services.domains.certificates);

  return {
    app,
    deps,
    services,
    ownerKeyToPrint: boot.printKey,
    async listen() {
      const address = await app.listen({ host: config.host, port: config.port });
      if (!config.publicUrlFixed) publicUrl = address;
      if (https && config.tls.httpsPort !== undefined) {
        const port = await https.listen(config.host, config.tls.httpsPort);
        if (!httpsUrl) {
          const u = new URL(publicUrl);
          u.protocol = 'https:';
          u.port = port === 443 ? '' : String(port);
          httpsUrl = u.origin;
        }
      }
      await nodes.start(address);
      if (config.runWorkers) {
        deps.jobs.start();
        deps.events.start();
      }
      return address;
    },
    async close() {
      if (closing) return;
      closing = true;
      // Requests and leased jobs finish (or jobs are released for another worker) before the store closes.
      nodes.stop();
      // Responses still open after the grace (a stream whose client went quiet, a keep-alive socket
      // Node does not count as idle) are cut, so a stop is bounded instead of waiting out timeouts.
      const cut = setTimeout(() => app.server.closeAllConnections(), config.shutdownGraceMs);
      cut.unref();
      await Promise.all([app.close(), boxApi?.then((b) => b.close(), () => {}), https?.close(config.shutdownGraceMs), deps.jobs.stop({ graceMs: config.shutdownGraceMs }), deps.events.stop()]);
      clearTimeout(cut);
      await forwarder.close();
      for (const area of AREAS) await area.close?.(services);
      await deps.outbound.close();
      await bus.close();
      redis?.disconnect();
      await store.close();
      await tracing.stop();
    },
  };
}
