import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// One module owns outbound HTTP: src/platform/outbound.ts (pinned DNS, every redirect hop checked, the
// allow-list). This test reads every module under src/ and fails when another one calls `fetch`,
// imports a request/socket function (undici, node:http(s) request/get/Agent, node:net/tls connect,
// dgram, http2 connect, HTTP client packages) or a client of an outside service, unless it is in the
// short list below, each entry with the reason it is not a way around the guard.

const ROOT = join(import.meta.dirname, '../..');
const SRC = join(ROOT, 'src');

/** Module -> the imported names that open connections ('*': any value import of it). */
const OUTBOUND_IMPORTS: Record<string, '*' | string[]> = {
  undici: '*',
  'node-fetch': '*',
  axios: '*',
  got: '*',
  ws: '*',
  pg: '*',
  ioredis: '*',
  'node:dgram': '*',
  'node:http': ['request', 'get', 'Agent', 'globalAgent', 'ClientRequest'],
  'node:https': ['request', 'get', 'Agent', 'globalAgent'],
  'node:http2': ['connect'],
  'node:net': ['connect', 'createConnection', 'Socket'],
  'node:tls': ['connect', 'TLSSocket'],
};
/** Package prefixes whose every value import is a client of an outside service. */
const OUTBOUND_PREFIXES = ['@aws-sdk/', '@modelcontextprotocol/sdk/client', '@opentelemetry/exporter-'];

/** file (relative to src/) -> why its connections are not to a host a user chose. */
const EXCEPTIONS: Record<string, string> = {
  'platform/outbound.ts': 'the owner: the guarded client',
  'blob/s3.ts': "the S3 client: the endpoint is the operator's (NUBE_S3_ENDPOINT), never a user's",
  'blob/stores.ts': "builds that S3 client for the operator's endpoint",
  'platform/jobs-test-kit.ts': 'test support: creates the temporary PostgreSQL databases of the job queue tests',
  'platform/node-forward.ts':
    "the internal channel between nube's own nodes: connects only to addresses nodes registered for themselves in the nodes table (NUBE_NODE_ADDRESS or their listen address), with the credential derived from NUBE_SECRET",
  'platform/tracing.ts': "the OTLP trace exporter: the collector is the operator's (OTEL_EXPORTER_OTLP_ENDPOINT), never a user's",
  'store/db.ts': "the metadata store: PostgreSQL at the operator's DATABASE_URL",
  'store/backup.ts': "nube backup and restore of the metadata store: PostgreSQL at the operator's DATABASE_URL",
  'server.ts': "Redis at the operator's REDIS_URL",
  'platform/doctor-checks.ts': "nube doctor probes the operator's own PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)",
  'areas/sandboxes/proxy.ts': "the exposed-port proxy: connects only to a sandbox's own address on nube's bridge, which nube assigned",
  'areas/sandboxes/networking/ssh-helper-client.ts':
    "the SSH gateway's link to its helper inside a sandbox, at the sandbox's own address on nube's bridge",
  'areas/sandboxes/networking/raw-listener.ts':
    "the raw TCP/UDP port relay: connects only to a sandbox's own address on nube's bridge, which nube assigned",
  'areas/sandboxes/runtime/namespaces/spawner.ts': "connects to nube-helper's Unix socket in nube's data directory",
  'areas/agents/connection.ts': "connects to the agent program in an agent's own sandbox, at the address nube assigned on its bridge",
  'platform/websocket.ts': "imports ws for its WebSocketServer (the registry's WebSocket operations): it accepts connections and opens none",
  'areas/agents/ws.ts': "imports ws for its WebSocketServer (the agents' wsUrl endpoint): it accepts connections and opens none",
  'areas/databases/hrana/ws.ts': "imports ws for its WebSocketServer (libSQL's Hrana over WebSocket on libsqlUrl): it accepts connections and opens none",
  'areas/agents/program/llm.ts': "runs inside the agent's sandbox (bundled there), not in nube: it calls nube's LLM gateway, under the sandbox's network policy",
  'areas/agents/program/mcp.ts': "runs inside the agent's sandbox, not in nube: the caller's MCP servers, reached under the sandbox's network policy",
};

interface Finding {
  file: string;
  line: number;
  what: string;
}

const isOutboundModule = (m: string) => OUTBOUND_IMPORTS[m.startsWith('node:') ? m : `node:${m}`] ?? OUTBOUND_IMPORTS[m] ?? (OUTBOUND_PREFIXES.some((p) => m.startsWith(p)) ? '*' : undefined);

/** Outbound uses in one source text. */
function findOutbound(file: string, text: string): Finding[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: Finding[] = [];
  const at = (node: ts.Node, what: string) =>
    found.push({ file, line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1, what });
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier) && !node.importClause?.isTypeOnly) {
      const mod = node.moduleSpecifier.text;
      const rule = isOutboundModule(mod);
      const clause = node.importClause;
      if (rule && clause) {
        const names: string[] = [];
        if (clause.name) names.push('default');
        const nb = clause.namedBindings;
        if (nb && ts.isNamespaceImport(nb)) names.push('*');
        if (nb && ts.isNamedImports(nb)) {
          for (const el of nb.elements) if (!el.isTypeOnly) names.push((el.propertyName ?? el.name).text);
        }
        const hits = rule === '*' ? names : names.filter((n) => n === 'default' || n === '*' || rule.includes(n));
        if (hits.length) at(node, `imports ${hits.join(', ')} from ${mod}`);
      }
    }
    if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const isFetch =
        (ts.isIdentifier(callee) && callee.text === 'fetch') ||
        (ts.isPropertyAccessExpression(callee) && callee.name.text === 'fetch' && ts.isIdentifier(callee.expression) && ['globalThis', 'global', 'window', 'self'].includes(callee.expression.text));
      if (isFetch) at(node, 'calls fetch');
      // require('undici') / import('undici')
      const arg = node.arguments[0];
      const dynamic = callee.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(callee) && callee.text === 'require');
      if (dynamic && arg && ts.isStringLiteral(arg) && isOutboundModule(arg.text)) at(node, `loads ${arg.text}`);
    }
    if (ts.isNewExpression(node) && ts.isIdentifier(node.expression) && ['WebSocket', 'EventSource', 'XMLHttpRequest'].includes(node.expression.text)) {
      at(node, `new ${node.expression.text}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return /\.ts$/.test(e.name) && !/\.test\.ts$/.test(e.name) ? [p] : [];
  });
}

describe('outbound HTTP has one owner', () => {
  const findings = sourceFiles(SRC).flatMap((p) => findOutbound(relative(SRC, p), readFileSync(p, 'utf8')));

  it('no module under src/ but the listed ones opens outbound connections', () => {
    const bypasses = findings.filter((f) => !(f.file in EXCEPTIONS)).map((f) => `src/${f.file}:${f.line} ${f.what}`);
    expect(bypasses, 'use OutboundClient from src/platform/outbound.ts (deps.outbound) instead').toEqual([]);
  });

  it('every listed exception is still needed (a stale entry would hide a future bypass)', () => {
    const used = new Set(findings.map((f) => f.file));
    expect(Object.keys(EXCEPTIONS).filter((f) => !used.has(f))).toEqual([]);
  });

  it('recognises the ways around the guard', () => {
    const sample = [
      "import { request } from 'undici';",
      "import { fetch as f2 } from 'undici';",
      "import * as http from 'node:http';",
      "import { get } from 'https';",
      "import { connect } from 'node:net';",
      "import type { Socket } from 'node:net';",
      "import { isIP } from 'node:net';",
      "import { createServer } from 'node:http';",
      'await fetch(url);',
      'await globalThis.fetch(url);',
      'await services.web.fetch(p, x);',
      "const u = await import('undici');",
      'new WebSocket(url);',
    ].join('\n');
    expect(findOutbound('sample.ts', sample).map((f) => `${f.line} ${f.what}`)).toEqual([
      '1 imports request from undici',
      '2 imports fetch from undici',
      '3 imports * from node:http',
      '4 imports get from https',
      '5 imports connect from node:net',
      '9 calls fetch',
      '10 calls fetch',
      '12 loads undici',
      '13 new WebSocket',
    ]);
  });
});
