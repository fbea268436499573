import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

// What a PDF really holds, read with poppler-utils (pdfinfo, pdftotext, pdftoppm): tests look at what
// was rendered, not at the HTML that went in.

const run = promisify(execFile);

async function withFile<T>(pdf: Buffer, fn: (file: string, dir: string) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'nube-pdf-'));
  const file = join(dir, 'doc.pdf');
  writeFileSync(file, pdf);
  try {
    return await fn(file, dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface PdfInfo {
  pages: number;
  /** Size of the first page in PostScript points (1/72 in). */
  widthPt: number;
  heightPt: number;
}

export function pdfInfo(pdf: Buffer): Promise<PdfInfo> {
  return withFile(pdf, async (file) => {
    const { stdout } = await run('pdfinfo', [file]);
    const pages = Number(/^Pages:\s+(\d+)/m.exec(stdout)?.[1]);
    const size = /^Page size:\s+([\d.]+) x ([\d.]+) pts/m.exec(stdout);
    return { pages, widthPt: Number(size?.[1]), heightPt: Number(size?.[2]) };
  });
}

/** The text of every page, in reading order, one string per page. */
export function pdfText(pdf: Buffer): Promise<string[]> {
  return withFile(pdf, async (file) => {
    const { stdout } = await run('pdftotext', ['-layout', '-enc', 'UTF-8', file, '-']);
    return stdout.split('\f').slice(0, -1);
  });
}

/** Each page as a PNG at `dpi`. */
export function pdfPngs(pdf: Buffer, dpi = 50): Promise<Buffer[]> {
  return withFile(pdf, async (file, dir) => {
    await run('pdftoppm', ['-png', '-r', String(dpi), file, join(dir, 'page')]);
    return readdirSync(dir)
      .filter((f) => f.startsWith('page') && f.endsWith('.png'))
      .sort()
      .map((f) => readFileSync(join(dir, f)));
  });
}

/** Paper sizes in points (1/72 in), as standardized. */
export const PAPER = { A4: [595.28, 841.89], A5: [419.53, 595.28], Letter: [612, 792] } as const;

/** Whether the first page is `paper` within 1.5 pt (Chromium rounds page sizes to whole device pixels). */
export function isPaper(info: PdfInfo, paper: keyof typeof PAPER): boolean {
  const [w, h] = PAPER[paper];
  return Math.abs(info.widthPt - w) < 1.5 && Math.abs(info.heightPt - h) < 1.5;
}
