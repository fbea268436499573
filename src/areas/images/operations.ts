import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { File } from '../files/schemas.js';
import type { ImagesService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    images: ImagesService;
  }
}

const tags = ['Images'];

const Source = {
  fileId: z.string().min(1).max(200).describe('Image file to transform; the original is unchanged'),
  name: z
    .string()
    .min(1)
    .max(255)
    .optional()
    .describe('Name of the new file (default derived from the original)'),
};
const Px = z.number().int().min(1).max(16_384);
const ERRORS = [
  { status: 400, code: 'NotAnImage', description: 'The file is not an image format that can be decoded' },
  { status: 400, code: 'ImageTooLarge', description: 'Over 100 MB, or over 100 megapixels' },
  { status: 402, description: 'Insufficient plan: image transformation is included in Mega and Tera' },
];
const DESCRIPTION = 'Writes the result as a new file and returns it; the original is unchanged.';

export const imagesOperations = [
  defineOperation({
    id: 'images.optimize',
    method: 'POST',
    path: '/images/optimize',
    summary: 'Re-encode an image as WebP or AVIF into a new, smaller file',
    description: DESCRIPTION,
    tags,
    auth: ['owner'],
    body: z.object({
      ...Source,
      format: z.enum(['webp', 'avif']).default('webp'),
      quality: z.number().int().min(1).max(100).default(80).describe('Encoder quality 1-100 (default 80)'),
    }),
    response: File,
    errors: ERRORS,
    handler: ({ principal, body, services }) =>
      services.images.transform(principal, body, { kind: 'optimize', format: body.format, quality: body.quality }),
  }),
  defineOperation({
    id: 'images.resize',
    method: 'POST',
    path: '/images/resize',
    summary: 'Resize an image into a new file',
    description: `${DESCRIPTION} Give width, height or both; with one, the aspect ratio is kept.`,
    tags,
    auth: ['owner'],
    body: z
      .object({
        ...Source,
        width: Px.optional().describe('Target width in pixels'),
        height: Px.optional().describe('Target height in pixels'),
        fit: z
          .enum(['cover', 'contain', 'fill', 'inside', 'outside'])
          .default('inside')
          .describe('How to fit both dimensions (default inside: never crops or enlarges beyond the box)'),
      })
      .refine((b) => b.width !== undefined || b.height !== undefined, {
        message: 'give width, height or both',
        path: ['width'],
      }),
    response: File,
    errors: ERRORS,
    handler: ({ principal, body, services }) =>
      services.images.transform(principal, body, { kind: 'resize', width: body.width, height: body.height, fit: body.fit }),
  }),
  defineOperation({
    id: 'images.rotate',
    method: 'POST',
    path: '/images/rotate',
    summary: 'Rotate an image into a new file',
    description: DESCRIPTION,
    tags,
    auth: ['owner'],
    body: z.object({
      ...Source,
      degrees: z.number().int().min(-360).max(360).describe('Clockwise angle; multiples of 90 are lossless'),
      background: z
        .string()
        .max(32)
        .optional()
        .describe('Fill color for other angles (CSS color, default transparent)'),
    }),
    response: File,
    errors: ERRORS,
    handler: ({ principal, body, services }) =>
      services.images.transform(principal, body, { kind: 'rotate', degrees: body.degrees, background: body.background }),
  }),
  defineOperation({
    id: 'images.crop',
    method: 'POST',
    path: '/images/crop',
    summary: 'Crop a rectangle of an image into a new file',
    description: `${DESCRIPTION} The rectangle must lie inside the image (400 otherwise).`,
    tags,
    auth: ['owner'],
    body: z.object({
      ...Source,
      left: z.number().int().min(0).describe('Left edge in pixels'),
      top: z.number().int().min(0).describe('Top edge in pixels'),
      width: Px.describe('Width in pixels'),
      height: Px.describe('Height in pixels'),
    }),
    response: File,
    errors: ERRORS,
    handler: ({ principal, body, services }) =>
      services.images.transform(principal, body, { kind: 'crop', left: body.left, top: body.top, width: body.width, height: body.height }),
  }),
  defineOperation({
    id: 'images.grayscale',
    method: 'POST',
    path: '/images/grayscale',
    summary: 'Convert an image to grayscale into a new file',
    description: DESCRIPTION,
    tags,
    auth: ['owner'],
    body: z.object(Source),
    response: File,
    errors: ERRORS,
    handler: ({ principal, body, services }) => services.images.transform(principal, body, { kind: 'grayscale' }),
  }),
];
