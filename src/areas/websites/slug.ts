import { randomToken } from '../../platform/ids.js';

export const SLUG_PATTERN = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Names that would read as nube's own hosts; nobody's site may take them. */
export const RESERVED_SLUGS = new Set([
  'www',
  'api',
  'app',
  'admin',
  'mail',
  'docs',
  'status',
  'nube',
  'sites',
  'assets',
  'static',
  'cdn',
]);

const LOWER36 = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** A DNS-label slug from a name, accents dropped ("Año Nuevo" -> "ano-nuevo-k3x9qa"), with a random tail. */
export function slugFrom(name: string): string {
  const base = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40)
    .replace(/-+$/g, '');
  return `${base || 'site'}-${randomToken(6, LOWER36)}`;
}
