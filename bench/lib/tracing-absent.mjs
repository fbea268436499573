// The tracing module with its code path compiled out: what nube would be with no tracing at all. The
// api bench's "tracing compiled out" server loads this in place of src/platform/tracing.ts (through
// tracing-absent-hooks.mjs), so the ratio of the real server (tracing off) to it is what the off path
// costs. Same exports, bodies reduced to nothing.
export { SpanKind } from '@opentelemetry/api';

export const tracingOn = () => false;
export const startTracing = async () => ({ stop: async () => {} });
export const inSpan = (_name, _attributes, fn) => fn();
export const injectTraceContext = () => {};
export const withTraceContext = (headers) => headers;
export const installRequestTracing = () => {};
