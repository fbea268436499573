import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { round } from './stats.js';

/** bench/results, where every area writes `<area>.json`; docs/benchmarks.md is generated from them. */
export const RESULTS_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'results');

export interface Machine {
  cpus: number;
  model: string;
  memGB: number;
  node: string;
}

export interface ResultRow {
  /** What was measured, e.g. "nube GET /api/v2/account (SQLite)". */
  name: string;
  p50Ms?: number;
  p99Ms?: number;
  throughputPerSec?: number;
  /** This row divided by the `ratioAgainst` row (throughput, or latency when stated in notes). */
  ratio?: number;
  /** The name of the row the ratio is computed against (the physical limit / baseline). */
  ratioAgainst?: string;
  /** The target in words, e.g. ">= 0.5x bare throughput, p99 < 10 ms". */
  target?: string;
  /** Whether this row meets its target; absent when it has none. */
  pass?: boolean;
  /** Further numeric or text columns specific to an area. */
  [extra: string]: string | number | boolean | undefined;
}

export interface BenchResult {
  area: string;
  /** The command that produced this result, e.g. "npm run bench -- api". */
  command: string;
  /** ISO timestamp of the run. */
  date: string;
  machine: Machine;
  rows: ResultRow[];
  /** Method, fairness, caveats: rendered as a list under the table. */
  notes: string[];
}

export function machine(): Machine {
  const c = cpus();
  return {
    cpus: c.length,
    model: c[0]?.model.trim() ?? 'unknown',
    memGB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  };
}

/** A result with this machine and the current date filled in. */
export function newResult(area: string, rows: ResultRow[], notes: string[] = [], command = `npm run bench -- ${area}`): BenchResult {
  return { area, command, date: new Date().toISOString(), machine: machine(), rows, notes };
}

/** Writes bench/results/<area>.json (numbers rounded) and returns its path. */
export function writeResult(result: BenchResult): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = join(RESULTS_DIR, `${result.area}.json`);
  const rows = result.rows.map((r) =>
    Object.fromEntries(Object.entries(r).map(([k, v]) => [k, typeof v === 'number' ? round(v) : v])),
  ) as ResultRow[];
  writeFileSync(file, `${JSON.stringify({ ...result, rows }, null, 2)}\n`);
  return file;
}

const PREFERRED = ['name', 'p50Ms', 'p99Ms', 'throughputPerSec', 'ratio', 'ratioAgainst', 'target', 'pass'];

/** The columns of `rows`: the common ones first in a fixed order, then extras in first-seen order. */
export function columnsOf(rows: readonly ResultRow[]): string[] {
  const seen = new Set<string>();
  for (const r of rows) for (const k of Object.keys(r)) if (r[k] !== undefined) seen.add(k);
  return [...PREFERRED.filter((k) => seen.has(k)), ...[...seen].filter((k) => !PREFERRED.includes(k))];
}

export function formatCell(v: ResultRow[string]): string {
  if (v === undefined) return '';
  if (typeof v === 'boolean') return v ? 'yes' : 'NO';
  if (typeof v === 'number') return String(round(v));
  return v;
}

/** Prints rows as an aligned text table to stdout. */
export function printTable(rows: readonly ResultRow[]): void {
  const cols = columnsOf(rows);
  const cells = [cols, ...rows.map((r) => cols.map((c) => formatCell(r[c])))];
  const widths = cols.map((_, i) => Math.max(...cells.map((line) => line[i]!.length)));
  const fmt = (line: string[]) =>
    line.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  console.log(fmt(cols));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const line of cells.slice(1)) console.log(fmt(line));
}

/** Rows as a GitHub-flavoured Markdown table. */
export function markdownTable(rows: readonly ResultRow[]): string {
  const cols = columnsOf(rows);
  const esc = (s: string) => s.replace(/\|/g, '\\|');
  const lines = [
    `| ${cols.join(' | ')} |`,
    `| ${cols.map((c) => (c === 'name' || c === 'target' || c === 'ratioAgainst' ? '---' : '---:')).join(' | ')} |`,
    ...rows.map((r) => `| ${cols.map((c) => esc(formatCell(r[c]))).join(' | ')} |`),
  ];
  return lines.join('\n');
}
