import sharp from 'sharp';
import type { BusEvent } from '../../src/platform/events.js';
import type { DialectName } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';

export interface DocsNube extends TestNube {
  events: BusEvent[];
  api: (method: string, path: string, body?: unknown, key?: string) => Promise<Response>;
  /** Uploads bytes as a DONE file of the owner (or of `key`'s account); returns its id. */
  upload(name: string, data: Buffer, contentType: string, key?: string): Promise<string>;
}

export async function startDocsNube(
  dialect: DialectName,
  env: Record<string, string> = {},
): Promise<DocsNube> {
  const t = await startNube({ dialect, env: { NUBE_OWNER_PLAN: 'mega', ...env } });
  const events: BusEvent[] = [];
  t.nube.deps.bus.subscribe((e) => {
    events.push(e);
  });
  const api = caller(t);
  return {
    ...t,
    events,
    api,
    async upload(name, data, contentType, key) {
      const created = await json(
        await api('POST', '/files', { fileName: name, contentType, size: data.length }, key),
      );
      const put = await fetch(created.putUrl, { method: 'PUT', body: data });
      if (put.status !== 200) throw new Error(`upload failed: ${put.status}`);
      return created.file.id as string;
    },
  };
}

export const redPng = () =>
  sharp({ create: { width: 60, height: 60, channels: 3, background: { r: 255, g: 0, b: 0 } } })
    .png()
    .toBuffer();

/** The RGB of pixel (x, y) of a PNG. */
export async function pixel(png: Buffer, x: number, y: number): Promise<number[]> {
  const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
  const at = (y * info.width + x) * info.channels;
  return [...data.subarray(at, at + 3)];
}

/** Whether a PNG has a clearly red area somewhere (the test image, placed by layout). */
export async function hasRed(png: Buffer): Promise<boolean> {
  const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
  let red = 0;
  for (let i = 0; i < data.length; i += info.channels)
    if (data[i]! > 220 && data[i + 1]! < 40 && data[i + 2]! < 40) red += 1;
  return red > 100;
}
