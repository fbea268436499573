import { hoistDefs, inputSchema, type JsonSchema, outputSchema } from './json-schema.js';
import { type AnyOperation, pathParamNames } from './operation.js';
import { SCHEMES, type SchemeName } from './auth.js';
import { API_PREFIX } from './rest.js';

const ERROR_REF = { $ref: '#/components/schemas/Error' };

const STANDARD_ERRORS: Record<number, string> = {
  400: 'Invalid request: params, query or body failed validation, or malformed JSON',
  401: 'Missing or invalid credential',
  404: 'Resource absent (another owner\'s resource is also a 404)',
  415: 'The body is not sent as application/json',
  429: 'Rate limited; see Retry-After',
  500: 'Internal error (no internals in the body)',
};

const SECURITY_SCHEMES: Record<string, JsonSchema> = {
  ownerBearer: { type: 'http', scheme: 'bearer', description: SCHEMES.owner.description },
  ownerApiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: SCHEMES.owner.description },
  agentToken: { type: 'http', scheme: 'bearer', description: SCHEMES.agent.description },
  fleetAgentToken: { type: 'http', scheme: 'bearer', description: SCHEMES.fleetAgent.description },
  fleetPublicKey: { type: 'http', scheme: 'bearer', description: SCHEMES.fleetPublic.description },
  shareToken: { type: 'apiKey', in: 'query', name: 'token', description: SCHEMES.share.description },
  clientCredential: { type: 'http', scheme: 'bearer', description: SCHEMES.client.description },
  databaseToken: { type: 'http', scheme: 'bearer', description: SCHEMES.database.description },
};

const SECURITY_BY_SCHEME: Record<Exclude<SchemeName, 'public'>, string[]> = {
  owner: ['ownerBearer', 'ownerApiKey'],
  agent: ['agentToken'],
  fleetAgent: ['fleetAgentToken'],
  fleetPublic: ['fleetPublicKey'],
  share: ['shareToken'],
  client: ['clientCredential'],
  database: ['databaseToken'],
};

export interface OpenApiInfo {
  title: string;
  version: string;
  serverUrl: string;
}

/** The OpenAPI 3.1 document, derived from the registry alone. */
export function buildOpenApi(ops: AnyOperation[], info: OpenApiInfo): JsonSchema {
  const paths: Record<string, Record<string, unknown>> = {};
  const named: Record<string, JsonSchema> = {};
  const input = (s: Parameters<typeof inputSchema>[0]) => hoistDefs(inputSchema(s), named, 'Input');
  const output = (s: Parameters<typeof outputSchema>[0]) => hoistDefs(outputSchema(s), named, '');
  for (const op of ops) {
    for (const { method, path } of [{ method: op.method, path: op.path }, ...(op.aliases ?? [])]) {
      const isAlias = method !== op.method || path !== op.path;
      const key = API_PREFIX + path;
      paths[key] = paths[key] ?? {};
      const entry = paths[key];
      entry[method.toLowerCase()] = operationObject(op, isAlias ? `${op.id}.${method.toLowerCase()}` : op.id, path, input, output);
    }
  }
  return {
    openapi: '3.1.0',
    info: {
      title: info.title,
      version: info.version,
      description: 'Cloud Resource Service API v2 as implemented by nube. Operations marked x-nube-implemented: false answer 501 NotImplemented.',
    },
    servers: [{ url: info.serverUrl }],
    paths,
    components: {
      securitySchemes: SECURITY_SCHEMES,
      schemas: {
        ...named,
        Error: {
          type: 'object',
          description: 'Every error body, the HTTP layer\'s own included (414, 415, 431, ...)',
          required: ['error', 'code'],
          properties: {
            error: { type: 'string' },
            code: { type: 'string' },
            issues: {
              type: 'array',
              items: {
                type: 'object',
                required: ['path', 'message'],
                properties: {
                  path: { type: 'array', items: { type: ['string', 'number'] } },
                  message: { type: 'string' },
                  code: { type: 'string' },
                },
              },
            },
          },
        },
      },
    },
  };
}

type Convert = (s: Parameters<typeof inputSchema>[0]) => JsonSchema;

function operationObject(op: AnyOperation, operationId: string, path: string, input: Convert, output: Convert): Record<string, unknown> {
  const parameters: unknown[] = [];
  const paramSchema = op.params ? input(op.params) : undefined;
  for (const name of pathParamNames(path)) {
    const s = (paramSchema?.properties as Record<string, JsonSchema> | undefined)?.[name] ?? { type: 'string' };
    parameters.push({ name, in: 'path', required: true, schema: s });
  }
  if (op.query) {
    const qs = input(op.query);
    const req = new Set((qs.required as string[] | undefined) ?? []);
    for (const [name, s] of Object.entries((qs.properties ?? {}) as Record<string, JsonSchema>)) {
      const { description, ...schema } = s;
      parameters.push({ name, in: 'query', required: req.has(name), schema, ...(description ? { description } : {}) });
    }
  }
  const responses: Record<string, unknown> = {
    [String(op.successStatus ?? 200)]: {
      description: 'Success',
      content: op.produces
        ? Object.fromEntries(
            op.produces
              .split(/,\s*/)
              .map((type) => [type, { schema: type.startsWith('application/json') ? output(op.response) : { type: 'string' } }]),
          )
        : { 'application/json': { schema: output(op.response) } },
    },
  };
  const statuses = new Map<number, string>();
  for (const s of [400, 401, 404, 429, 500]) statuses.set(s, STANDARD_ERRORS[s]!);
  if (op.body) statuses.set(415, STANDARD_ERRORS[415]!);
  if (!op.handler) statuses.set(501, 'Not implemented yet in this nube release');
  for (const e of op.errors ?? []) {
    const prev = statuses.get(e.status);
    const text = [e.code, e.description].filter(Boolean).join(': ') || `Error ${e.status}`;
    statuses.set(e.status, prev && op.errors?.some((x) => x.status === e.status && x !== e) ? `${prev}; ${text}` : text);
  }
  for (const [status, description] of [...statuses].sort((a, b) => a[0] - b[0])) {
    responses[String(status)] = { description, content: { 'application/json': { schema: ERROR_REF } } };
  }
  const security = op.auth.flatMap((s) => (s === 'public' ? [{}] : SECURITY_BY_SCHEME[s].map((n) => ({ [n]: [] }))));
  return {
    operationId,
    summary: op.summary,
    ...(op.description ? { description: op.description } : {}),
    tags: op.tags,
    parameters,
    ...(op.body
      ? { requestBody: { required: !op.bodyOptional, content: { 'application/json': { schema: input(op.body) } } } }
      : {}),
    responses,
    security,
    'x-nube-implemented': Boolean(op.handler),
  };
}
