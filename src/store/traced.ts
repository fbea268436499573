// A span per metadata-store statement while traces are on (platform/tracing.ts), as a Kysely plugin:
// started when the statement is compiled, under the request or job that runs it, ended with its result.
// A statement that fails ends no span (Kysely calls no plugin then): its request's span has the error.
import { type Span, SpanKind, trace } from '@opentelemetry/api';
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely';
import { tracingOn } from '../platform/tracing.js';

const KINDS: Record<string, string> = {
  SelectQueryNode: 'select',
  InsertQueryNode: 'insert',
  UpdateQueryNode: 'update',
  DeleteQueryNode: 'delete',
  MergeQueryNode: 'merge',
};

export function storeTracing(system: 'sqlite' | 'postgresql'): KyselyPlugin {
  const open = new WeakMap<object, Span>();
  return {
    transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
      if (tracingOn()) {
        const op = KINDS[args.node.kind] ?? 'statement';
        open.set(args.queryId, trace.getTracer('nube').startSpan(`store ${op}`, { kind: SpanKind.CLIENT, attributes: { 'db.system.name': system, 'db.operation.name': op } }));
      }
      return args.node;
    },
    async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
      const span = open.get(args.queryId);
      if (span) {
        open.delete(args.queryId);
        span.end();
      }
      return args.result;
    },
  };
}
