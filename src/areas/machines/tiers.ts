// The tier catalogue: what a machine's box gets and what it costs. One host runs every box, so
// "reserved" can only mean cores nobody else is promised (see reservedCapacity in service.ts).
import type { z } from 'zod';
import type { MachineTier } from './schemas.js';

export type Tier = z.input<typeof MachineTier>;

export const DISK_ADDON_MXN_PER_100GB = 49;

export const TIERS: Tier[] = [
  {
    name: 'nano',
    vcpus: 0.25,
    memoryMB: 256,
    diskGB: 5,
    monthlyMxn: 59,
    reservedMonthlyMxn: null,
    diskAddonMonthlyMxnPer100GB: DISK_ADDON_MXN_PER_100GB,
    canBuild: false,
    notes: 'Cannot sustain a build: launches onto nano are refused; build on micro or larger, or create from a prebuilt template.',
  },
  {
    name: 'micro',
    vcpus: 0.5,
    memoryMB: 512,
    diskGB: 10,
    monthlyMxn: 119,
    reservedMonthlyMxn: 199,
    diskAddonMonthlyMxnPer100GB: DISK_ADDON_MXN_PER_100GB,
    canBuild: true,
    notes: 'The practical minimum for an always-on Node app.',
  },
  {
    name: 'small',
    vcpus: 1,
    memoryMB: 1024,
    diskGB: 20,
    monthlyMxn: 229,
    reservedMonthlyMxn: 399,
    diskAddonMonthlyMxnPer100GB: DISK_ADDON_MXN_PER_100GB,
    canBuild: true,
    notes: null,
  },
  {
    name: 'medium',
    vcpus: 2,
    memoryMB: 2048,
    diskGB: 40,
    monthlyMxn: 449,
    reservedMonthlyMxn: 799,
    diskAddonMonthlyMxnPer100GB: DISK_ADDON_MXN_PER_100GB,
    canBuild: true,
    notes: null,
  },
];

export function tierNamed(name: string): Tier | undefined {
  return TIERS.find((t) => t.name === name);
}

/** Monthly price: the tier at its CPU mode plus each 100 GB disk add-on. */
export function monthlyPrice(t: Tier, cpuMode: 'shared' | 'reserved', diskAddonsGB: number): number {
  const base = cpuMode === 'reserved' ? (t.reservedMonthlyMxn ?? t.monthlyMxn) : t.monthlyMxn;
  return base + (diskAddonsGB / 100) * t.diskAddonMonthlyMxnPer100GB;
}

/**
 * What deleting costs this month: the share of the monthly price from the later of creation and the
 * start of the month until now, in centavos (whole, rounded up: a started centavo is charged).
 */
export function proratedCentavos(monthlyMxn: number, createdAt: number, now = Date.now()): number {
  const d = new Date(now);
  const monthStart = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  const monthEnd = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  const from = Math.max(createdAt, monthStart);
  const share = Math.max(0, now - from) / (monthEnd - monthStart);
  return Math.ceil(monthlyMxn * 100 * share);
}
