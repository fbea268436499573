export { EmbeddedDatabaseEngine } from './embedded-engine.js';
export { DatabaseEngineError, ENGINE_ERROR_CODES, type EngineErrorCode } from './errors.js';
export * from './schemas.js';
export type { DatabaseEngine, DatabaseSnapshot, EmbeddedEngineOptions, RequestLimits } from './types.js';
export type { DatabaseUsage } from './usage.js';
export type * from './hrana-types.js';
