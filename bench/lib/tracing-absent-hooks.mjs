// Module hooks (node --import) that load bench/lib/tracing-absent.ts wherever nube's sources import
// src/platform/tracing.js: the api bench's baseline with tracing compiled out.
import { register } from 'node:module';

const hooks = `
const absent = ${JSON.stringify(new URL('./tracing-absent.mjs', import.meta.url).href)};
export async function resolve(specifier, context, next) {
  if (/(^|\\/)tracing\\.js$/.test(specifier) && context.parentURL?.includes('/src/')) return { url: absent, shortCircuit: true };
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
