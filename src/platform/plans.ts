export const PLAN_NAMES = ['byte', 'mega', 'tera'] as const;
export type PlanName = (typeof PLAN_NAMES)[number];

/** The spec's plan allowances, encoded once. `null` = not included in the plan. */
export interface Plan {
  name: PlanName;
  title: string;
  monthlyMxn: number;
  listMonthlyMxn: number;
  storageBytes: number;
  /** A sandbox's writable disk (MiB): its default and most a create may ask for (diskMB). */
  sandboxDiskMb: number;
  /** Volumes an account may hold, and the sum of their limits (GiB), copies and restores included. */
  volumes: number;
  volumeGB: number;
  aiCreditsPerMonth: number;
  llmTokensPerMonth: number | null;
  databases: number;
  boxes: number;
  simultaneousAgents: number;
  sessionSeconds: number;
  trashRetentionDays: number;
  /** How far back a database can be restored (its WAL history is kept this long). */
  databaseHistoryDays: number;
  /** How long the audit log keeps an entry. */
  auditRetentionDays: number;
  includes: { staticWebsites: boolean; customDomains: boolean; hlsStreaming: boolean; imageTransformation: boolean; branding: boolean };
}

const MB = 1024 * 1024;
const GB = 1024 * MB;
const HOUR = 3600;

export const PLANS: Record<PlanName, Plan> = {
  byte: {
    name: 'byte',
    title: 'Byte',
    monthlyMxn: 0,
    listMonthlyMxn: 0,
    storageBytes: 100 * MB,
    sandboxDiskMb: 2048,
    volumes: 2,
    volumeGB: 5,
    aiCreditsPerMonth: 999,
    llmTokensPerMonth: null,
    databases: 3,
    boxes: 1,
    simultaneousAgents: 4,
    sessionSeconds: 1 * HOUR,
    databaseHistoryDays: 1,
    trashRetentionDays: 7,
    auditRetentionDays: 7,
    includes: { staticWebsites: false, customDomains: false, hlsStreaming: false, imageTransformation: false, branding: true },
  },
  mega: {
    name: 'mega',
    title: 'Mega',
    monthlyMxn: 299,
    listMonthlyMxn: 499,
    storageBytes: 10 * GB,
    sandboxDiskMb: 10_240,
    volumes: 10,
    volumeGB: 100,
    aiCreditsPerMonth: 10_000,
    llmTokensPerMonth: 10_000_000,
    databases: 10,
    boxes: 2,
    simultaneousAgents: 8,
    sessionSeconds: 4 * HOUR,
    databaseHistoryDays: 7,
    trashRetentionDays: 7,
    auditRetentionDays: 90,
    includes: { staticWebsites: true, customDomains: true, hlsStreaming: true, imageTransformation: true, branding: false },
  },
  tera: {
    name: 'tera',
    title: 'Tera',
    monthlyMxn: 2490,
    listMonthlyMxn: 2490,
    storageBytes: 100 * GB,
    sandboxDiskMb: 51_200,
    volumes: 50,
    volumeGB: 1000,
    aiCreditsPerMonth: 50_000,
    llmTokensPerMonth: 50_000_000,
    databases: 20,
    boxes: 5,
    simultaneousAgents: 20,
    sessionSeconds: 24 * HOUR,
    databaseHistoryDays: 30,
    trashRetentionDays: 7,
    auditRetentionDays: 365,
    includes: { staticWebsites: true, customDomains: true, hlsStreaming: true, imageTransformation: true, branding: false },
  },
};

export type CountedAllowance = 'databases' | 'boxes' | 'simultaneousAgents';
