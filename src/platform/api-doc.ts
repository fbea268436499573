import { CREDENTIAL_REACH } from './credential-reach.js';
import type { JsonSchema } from './json-schema.js';

// docs/api.md: the API's contract for readers, rendered from the OpenAPI document (itself derived from
// the registry), so it says exactly what the server does. `npm run gen:sdk` rewrites it; a test fails
// when the committed file is stale.

export const API_DOC_PATH = 'docs/api.md';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

type Schema = JsonSchema & {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  additionalProperties?: Schema | boolean;
  description?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  maxItems?: number;
  format?: string;
};

interface Operation {
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  parameters: { name: string; in: string; required: boolean; schema: Schema; description?: string }[];
  requestBody?: { required: boolean; content: Record<string, { schema: Schema }> };
  responses: Record<string, { description: string; content?: Record<string, { schema: Schema }> }>;
  security: Record<string, string[]>[];
  'x-nube-implemented': boolean;
}

const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\s*\n\s*/g, ' ');
const refName = (ref: string) => ref.replace('#/components/schemas/', '');
const anchor = (name: string) => `schema-${name.toLowerCase()}`;
const code = (v: unknown) => `\`${typeof v === 'string' ? v : JSON.stringify(v)}\``;

/** A short type for a table cell. */
function typeOf(s: Schema | undefined): string {
  if (!s || Object.keys(s).filter((k) => k !== 'description').length === 0) return 'any';
  if (s.$ref) return `[${refName(s.$ref)}](#${anchor(refName(s.$ref))})`;
  const variants = s.anyOf ?? s.oneOf;
  if (variants) return [...new Set(variants.map(typeOf))].join(' or ');
  if (s.const !== undefined) return code(s.const);
  if (s.enum) return s.enum.map(code).join(' \\| ');
  const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
  const one = (t: string): string => {
    switch (t) {
      case 'array':
        return `array of ${typeOf(s.items)}${s.maxItems !== undefined ? ` (max ${s.maxItems})` : ''}`;
      case 'object':
        if (s.properties) return 'object';
        if (s.additionalProperties && typeof s.additionalProperties === 'object' && Object.keys(s.additionalProperties).length) {
          return `map of string to ${typeOf(s.additionalProperties)}`;
        }
        return 'object (free-form)';
      case 'integer':
      case 'number': {
        const lo = s.minimum;
        const hi = s.maximum !== undefined && s.maximum < Number.MAX_SAFE_INTEGER ? s.maximum : undefined;
        return lo !== undefined && hi !== undefined ? `${t} ${lo}-${hi}` : lo !== undefined && lo !== 0 ? `${t} >= ${lo}` : t;
      }
      case 'string': {
        if (s.format === 'uri') return 'URL';
        return s.maxLength !== undefined ? `string (max ${s.maxLength})` : 'string';
      }
      default:
        return t;
    }
  };
  return types.length ? types.map(one).join(' or ') : 'any';
}

function describe(s: Schema | undefined): string {
  let text = s?.description ?? '';
  if (s?.default !== undefined) text = `${text}${text && !/[.:;!?]$/.test(text) ? '.' : ''} Default ${code(s.default)}.`.trim();
  return cell(text);
}

/** The fields of an object schema as a table (a $ref names the schema instead). */
function fieldsTable(s: Schema, components: Record<string, Schema>): string[] {
  if (s.$ref) return [`[${refName(s.$ref)}](#${anchor(refName(s.$ref))})`, ''];
  const variants = s.anyOf ?? s.oneOf;
  if (variants?.every((v) => v.properties || v.$ref)) {
    return variants.flatMap((v, i) => [`One of (${i + 1} of ${variants.length}):`, '', ...fieldsTable(v, components)]);
  }
  if (!s.properties) return [`${typeOf(s)}${s.description ? `: ${cell(s.description)}` : ''}`, ''];
  const required = new Set(s.required ?? []);
  const rows = Object.entries(s.properties).map(
    ([name, f]) => `| \`${name}\` | ${typeOf(f)} | ${required.has(name) ? 'yes' : ''} | ${describe(f)} |`,
  );
  return ['| field | type | required | description |', '|---|---|---|---|', ...rows, ''];
}

function authOf(op: Operation): string {
  const names = op.security.flatMap((s) => Object.keys(s));
  if (names.length === 0 || op.security.some((s) => Object.keys(s).length === 0)) return 'none (public)';
  return [...new Set(names)].map((n) => `\`${n}\``).join(', ');
}

/** docs/api.md from the OpenAPI document. */
export function buildApiDoc(doc: JsonSchema): string {
  const paths = doc.paths as Record<string, Record<string, Operation>>;
  const components = ((doc.components as JsonSchema).schemas ?? {}) as Record<string, Schema>;
  const ops = Object.entries(paths).flatMap(([path, item]) =>
    METHODS.flatMap((m) => (item[m] ? [{ method: m.toUpperCase(), path, op: item[m] }] : [])),
  );
  const tags = [...new Set(ops.flatMap((o) => o.op.tags))];
  const out: string[] = [
    '# nube API v2',
    '',
    '<!-- Generated from the operation registry (src/areas/*/operations.ts) by `npm run gen:sdk`; do not edit. -->',
    '',
    `Version ${String((doc.info as JsonSchema).version)}. Every operation below is served as REST under \`/api/v2\`, as an MCP`,
    'tool at `/api/mcp` (the tool name is the operation id with `.` as `_`), and in the typed SDK',
    '(`packages/sdk`). The same contract, machine-readable: `GET /api/v2/openapi.json` (OpenAPI 3.1) and the',
    'public tool catalogue `GET /api/tools.json`. Operations marked "not implemented yet" answer',
    '501 `NotImplemented`.',
    '',
    '## Credentials',
    '',
    'Each credential is made for a holder, and reaches what that holder needs and nothing more (a test',
    'calls every operation with each and checks the rest is refused: 401, or 403 `CredentialNotAllowed`).',
    '',
    '| credential | held by | operations | other entry points | never |',
    '|---|---|---|---|---|',
    ...CREDENTIAL_REACH.map(
      (c) =>
        `| ${cell(c.credential)}${c.scheme ? ` (scheme \`${c.scheme}\`)` : ''} | ${cell(c.holder)} | ${
          c.operations === '*'
            ? 'all'
            : c.operations === 'scoped'
              ? 'those its `scopes` name'
              : c.operations.length
                ? c.operations.map((o) => `\`${o}\``).join(', ')
                : 'none'
        } | ${cell(c.routes)} | ${cell(c.never)} |`,
    ),
    '',
    'OpenAPI names: `ownerBearer`/`ownerApiKey` (owner), `agentToken`, `fleetAgentToken`, `fleetPublicKey`,',
    '`shareToken`, `clientCredential`. Another owner\'s resource answers 404, never 403.',
    '',
    '## Errors',
    '',
    'Every error body is `{ error, code, issues? }`: `error` says what went wrong for a person, `code` is',
    'stable for programs, and `issues` (400) lists `{ path, message, code }` per invalid value, `path`',
    'starting with `params`, `query` or `body`. The HTTP layer answers in the same shape: 400 `BadRequest` /',
    '`BadUrl` / `InvalidJson`, 408 `RequestTimeout`, 413 `PayloadTooLarge`, 414 `UriTooLong`, 415',
    '`UnsupportedMediaType` (request bodies are `application/json` only), 431 `HeadersTooLarge`, 503',
    '`Unavailable` while shutting down. Text may not contain NUL (U+0000): 400 in a field, 404 in a path id,',
    'except fields that go to a database or a sandbox. Free-form objects are limited in depth and size.',
    '',
    '## Operations',
    '',
    ...tags.map((t) => `- [${t}](#${t.toLowerCase().replace(/[^a-z0-9]+/g, '-')})`),
    '',
  ];
  for (const tag of tags) {
    out.push(`## ${tag}`, '');
    for (const { method, path, op } of ops.filter((o) => o.op.tags[0] === tag)) {
      out.push(`### \`${method} ${path}\``, '');
      out.push(`${cell(op.summary)}${op['x-nube-implemented'] ? '' : ' **(not implemented yet: answers 501)**'}`, '');
      out.push(`Operation \`${op.operationId}\` · credentials: ${authOf(op)}`, '');
      if (op.description) out.push(op.description, '');
      const params = op.parameters ?? [];
      if (params.length) {
        out.push('| parameter | in | type | required | description |', '|---|---|---|---|---|');
        for (const p of params) {
          const text = describe({ ...p.schema, description: p.description ?? p.schema.description });
          out.push(`| \`${p.name}\` | ${p.in} | ${typeOf(p.schema)} | ${p.required ? 'yes' : ''} | ${text} |`);
        }
        out.push('');
      }
      if (op.requestBody) {
        const [type, media] = Object.entries(op.requestBody.content)[0]!;
        out.push(`Body (\`${type}\`${op.requestBody.required ? '' : ', optional'}):`, '', ...fieldsTable(media.schema, components));
      }
      const answers = Object.entries(op.responses);
      const [ok, success] = answers.find(([s]) => s.startsWith('2'))!;
      const [okType, okMedia] = Object.entries(success.content ?? {})[0] ?? ['', undefined];
      out.push(`Answer ${ok} (\`${okType}\`):`, '', ...(okMedia ? fieldsTable(okMedia.schema, components) : ['(no body)', '']));
      const errs = answers.filter(([s]) => !s.startsWith('2'));
      out.push(`Errors: ${errs.map(([s, r]) => `${s} ${cell(r.description)}`).join('; ')}.`, '');
    }
  }
  out.push('## Schemas', '');
  for (const [name, s] of Object.entries(components).sort(([a], [b]) => a.localeCompare(b))) {
    out.push(`<a id="${anchor(name)}"></a>`, `### ${name}`, '');
    if (s.description) out.push(cell(s.description), '');
    out.push(...fieldsTable({ ...s, description: undefined }, components));
  }
  return `${out.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd()}\n`;
}
