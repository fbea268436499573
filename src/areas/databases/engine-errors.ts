import { ApiError, errors } from '../../platform/errors.js';
import { DatabaseEngineError } from './engine/index.js';

/** What the service knows when it maps an engine error: the size cap it asked for and why. */
export interface MapContext {
  /** Cap passed to the engine for this request, from what is left of the plan's storage. */
  capBytes?: number;
  /** The engine's own per-database cap. */
  engineCapBytes: number;
  planTitle: string;
  planStorageBytes: number;
}

/**
 * Engine errors as API errors. Everything the caller's SQL or body caused is a 400 (SQLite's own
 * message and extended code, `statementIndex` for a batch); a full plan is 402 like every other
 * storage quota; a full queue of the owner's requests is 429, a request that waited too long for an executor 503; only a crashed executor is a 500.
 */
export function toApiError(err: unknown, ctx: MapContext): unknown {
  if (!(err instanceof DatabaseEngineError)) return err;
  const extra: Record<string, unknown> =
    err.statementIndex === undefined ? {} : { statementIndex: err.statementIndex };
  if (err.isSqlError) return new ApiError(400, err.code, err.message, extra);
  switch (err.code) {
    case 'QueryTimeout':
    case 'ResultTooLarge':
    case 'InvalidRequest':
      return new ApiError(400, err.code, err.message, extra);
    case 'DatabaseTooLarge':
      if (ctx.capBytes !== undefined && ctx.capBytes < ctx.engineCapBytes) {
        return errors.paymentRequired(
          `storage allowance of your ${ctx.planTitle} plan (${ctx.planStorageBytes} bytes) is used up: ` +
            'this write needs more; delete rows, databases or files, or change plan',
          'StorageQuotaExceeded',
          { limitBytes: ctx.planStorageBytes, ...extra },
        );
      }
      return errors.forbidden(
        `a database may hold at most ${ctx.engineCapBytes} bytes; this write needs more`,
        'DatabaseTooLarge',
        { limitBytes: ctx.engineCapBytes, ...extra },
      );
    case 'DatabaseNotFound':
    case 'InvalidDatabaseId':
      return errors.notFound('database');
    case 'DatabaseExists':
      return errors.conflict(err.message, 'DatabaseExists');
    case 'QueueFull':
      // The owner's own backlog is full (its share of executors busy, its queue at the limit).
      return new ApiError(429, 'DatabaseQueueFull', err.message, { retryAfter: 1 }, { 'retry-after': '1' });
    case 'QueueTimeout':
      // Waited its whole allowance behind the account's own long-running requests; it never ran.
      return new ApiError(503, 'DatabaseBusy', err.message, { retryAfter: 5 }, { 'retry-after': '5' });
    case 'StreamLost':
      return new ApiError(400, err.code, err.message, extra);
    case 'EngineClosed':
      return errors.unavailable('the database engine is shutting down', 1);
    default:
      // EngineWorkerCrashed: a native crash of an executor, not something a request should cause.
      return new ApiError(
        500,
        'DatabaseExecutorCrashed',
        'the database executor crashed; nothing was committed',
      );
  }
}
