import type { Readable } from 'node:stream';
import type { FormatEnum, Metadata, OutputInfo, Sharp } from 'sharp';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { PLANS } from '../../platform/plans.js';
import type { File } from '../files/schemas.js';
import type { FilesService } from '../files/service.js';

/** Images are decoded whole in memory; bigger inputs are refused rather than risking the process. */
export const MAX_IMAGE_BYTES = 100 * 1024 * 1024;
/**
 * Pixels an image may have to be transformed (as Cloudflare Images: 100 megapixels). A few hundred kB
 * of PNG can declare 15,000 x 15,000 pixels, which decode to hundreds of MB; sharp's own default allows
 * 268 megapixels.
 */
export const MAX_IMAGE_PIXELS = 100_000_000;
/** Formats sharp writes; any other input (SVG, HEIC, RAW ...) is re-encoded as PNG. */
const WRITABLE = new Set(['jpeg', 'png', 'webp', 'avif', 'gif', 'tiff']);

export type ImageOp =
  | { kind: 'optimize'; format: 'webp' | 'avif'; quality: number }
  | { kind: 'resize'; width?: number; height?: number; fit: 'cover' | 'contain' | 'fill' | 'inside' | 'outside' }
  | { kind: 'rotate'; degrees: number; background?: string }
  | { kind: 'crop'; left: number; top: number; width: number; height: number }
  | { kind: 'grayscale' };

async function readAll(stream: Readable, limit: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of stream) {
    n += (c as Buffer).byteLength;
    if (n > limit) {
      stream.destroy();
      throw errors.badRequest(`images up to ${limit} bytes can be transformed`, undefined, 'ImageTooLarge');
    }
    parts.push(c as Buffer);
  }
  return Buffer.concat(parts);
}

const notAnImage = () => errors.badRequest('the file is not an image format that can be decoded', undefined, 'NotAnImage');

/** Transformations with sharp; the result is always a new file next to the original (same region, access). */
export class ImagesService {
  constructor(private readonly files: FilesService) {}

  async transform(p: Principal, source: { fileId: string; name?: string }, op: ImageOp): Promise<File> {
    const plan = PLANS[p.plan];
    if (!plan.includes.imageTransformation) {
      throw errors.paymentRequired(`image transformation is included in the Mega and Tera plans, not in ${plan.title}`, 'PlanUpgradeRequired');
    }
    const src = await this.files.doneRow(p, source.fileId);
    if (src.size > MAX_IMAGE_BYTES) throw errors.badRequest(`images up to ${MAX_IMAGE_BYTES} bytes can be transformed`, undefined, 'ImageTooLarge');
    const { stream } = await this.files.open(p, source.fileId);
    const input = await readAll(stream, MAX_IMAGE_BYTES);
    const sharp = (await import('sharp')).default; // a native library: loaded on first use, not at start

    let meta: Metadata;
    try {
      // The header only: no limit here, so an image too large is told apart from one that is no image.
      meta = await sharp(input, { limitInputPixels: false }).metadata();
    } catch {
      throw notAnImage();
    }
    if (!meta.format || !meta.width || !meta.height) throw notAnImage();
    // Refused from its header, before a pixel is decoded.
    if (meta.width * meta.height > MAX_IMAGE_PIXELS) {
      throw errors.badRequest(
        `images up to ${MAX_IMAGE_PIXELS / 1e6} megapixels can be transformed; this one is ${meta.width} x ${meta.height}`,
        undefined,
        'ImageTooLarge',
      );
    }

    let out: { data: Buffer; info: OutputInfo };
    try {
      out = await this.apply(sharp(input, { limitInputPixels: MAX_IMAGE_PIXELS }), op, meta).toBuffer({ resolveWithObject: true });
    } catch (err) {
      if (err instanceof ApiError) throw err;
      throw errors.badRequest(`the image could not be transformed: ${(err as Error).message}`, undefined, 'ImageTransformFailed');
    }
    const format = out.info.format === 'heif' ? 'avif' : out.info.format;
    const base = src.name.replace(/\.[^./]+$/, '');
    return this.files.createFromBytes(p, {
      fileName: source.name ?? `${base}-${op.kind}.${format === 'jpeg' ? 'jpg' : format}`,
      contentType: `image/${format}`,
      data: out.data,
      access: src.access as 'public' | 'private',
      region: src.region as 'LATAM' | 'US' | 'EU',
      assetId: src.asset_id ?? undefined,
      metadata: { sourceFileId: src.id, transform: op.kind },
    });
  }

  private apply(img: Sharp, op: ImageOp, meta: Metadata): Sharp {
    switch (op.kind) {
      case 'optimize':
        return op.format === 'webp' ? img.webp({ quality: op.quality }) : img.avif({ quality: op.quality });
      case 'resize':
        img = img.resize({ width: op.width, height: op.height, fit: op.fit });
        break;
      case 'rotate':
        img = img.rotate(op.degrees, { background: op.background ?? { r: 0, g: 0, b: 0, alpha: 0 } });
        break;
      case 'crop':
        if (op.left + op.width > (meta.width as number) || op.top + op.height > (meta.height as number)) {
          throw errors.validation([
            { path: ['width'], message: `the rectangle must lie inside the ${meta.width}x${meta.height} image` },
          ]);
        }
        img = img.extract({ left: op.left, top: op.top, width: op.width, height: op.height });
        break;
      case 'grayscale':
        img = img.grayscale();
        break;
    }
    // Keep the input's format when sharp can write it, so a transformed JPEG stays a JPEG.
    return WRITABLE.has(meta.format as string) ? img.toFormat(meta.format as keyof FormatEnum) : img.png();
  }
}
