// Module hooks (node --import) that load bench/lib/tracing-absent.mjs wherever nube's sources import
// src/platform/tracing.js: the api bench's baseline with tracing compiled out. With
// BENCH_TRACING_ABSENT unset the same hooks are registered but pass everything through, so both
// servers of the comparison run with the same module loading machinery.
import { register } from 'node:module';

const absent = process.env.BENCH_TRACING_ABSENT === '1';
const hooks = `
const absent = ${JSON.stringify(new URL('./tracing-absent.mjs', import.meta.url).href)};
export async function resolve(specifier, context, next) {
  if (${absent} && /(^|\\/)tracing\\.js$/.test(specifier) && context.parentURL?.includes('/src/')) return { url: absent, shortCircuit: true };
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
