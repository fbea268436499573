import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';

// The only place that reads process.env. Everything else receives a Config.

export const PLAN_NAMES = ['byte', 'mega', 'tera'] as const;
export type PlanName = (typeof PLAN_NAMES)[number];

export const OWNER_KEY_PATTERN = /^nube_sk_live_[A-Za-z0-9]{32,}$/;

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no'])
  .transform((v) => v === '1' || v === 'true' || v === 'yes');

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
    .regex(OWNER_KEY_PATTERN, 'must look like nube_sk_live_ followed by at least 32 characters of [A-Za-z0-9]')
    .optional(),
  NUBE_OWNER_PLAN: z.enum(PLAN_NAMES).default('tera'),
  NUBE_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  NUBE_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  NUBE_BODY_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .default(10 * 1024 * 1024),
  NUBE_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).default(600),
  NUBE_AUTH_CACHE_MS: z.coerce.number().int().min(0).max(60_000).default(2_000),
  NUBE_JOB_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(250),
  NUBE_WORKERS: bool.default(true),
  // CIDRs that outbound fetches (web, webhooks, launch) may reach although private/loopback.
  NUBE_OUTBOUND_ALLOW: csv.default([]),
});

export type Env = z.input<typeof envSchema>;

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
  logLevel: z.infer<typeof envSchema>['NUBE_LOG_LEVEL'];
  bodyLimitBytes: number;
  rateLimitPerMinute: number;
  authCacheMs: number;
  jobPollMs: number;
  runWorkers: boolean;
  outboundAllow: string[];
}

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
    authCacheMs: e.NUBE_AUTH_CACHE_MS,
    jobPollMs: e.NUBE_JOB_POLL_MS,
    runWorkers: e.NUBE_WORKERS,
    outboundAllow: e.NUBE_OUTBOUND_ALLOW,
  };
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
