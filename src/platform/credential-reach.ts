// What each credential may reach, with its holder in mind: one table, the one place a credential's reach
// is widened. The registry's `auth` lists must say exactly what this table says (test/registry.test.ts),
// and a standing test calls every operation and entry point with every credential and checks the rest
// is refused (test/platform/credentials.test.ts): a new route cannot widen a token by accident.
// docs/api.md's "Credentials" section is rendered from it.

export interface CredentialReach {
  /** The credential's name in docs, with its prefix. */
  credential: string;
  /** The auth scheme in the registry, where operations accept it. */
  scheme?: 'owner' | 'agent' | 'fleetAgent' | 'fleetPublic' | 'client' | 'share' | 'database';
  /** Who holds it, so what it must be safe in the hands of. */
  holder: string;
  /**
   * Registry operations it may call (exact); `*`: every operation that takes owner credentials;
   * `scoped`: those a scoped key's own `scopes` name (compiled per key by platform/scope-catalog.ts).
   */
  operations: readonly string[] | '*' | 'scoped';
  /** Entry points outside the registry it opens. */
  routes: string;
  /** What it must never reach, whoever holds it. */
  never: string;
}

export const CREDENTIAL_REACH: readonly CredentialReach[] = [
  {
    credential: 'Owner API key `nube_sk_live_...` (also `e2b_...` keys made with `format: "e2b"`)',
    scheme: 'owner',
    holder: "the account's owner: its servers, CLI, SDK, MCP client",
    operations: '*',
    routes: "MCP `/api/mcp`, an agent's ACP WebSocket (`wsUrl`), libSQL `/libsql/<id>/...`, E2B `/e2b/...`, sandbox terminals",
    never: "another account's resources (404, never 403)",
  },
  {
    credential:
      'Scoped owner key `nube_sk_live_...` made with `scopes` (POST /account/keys), and the `NUBE_API_KEY` nube mints into an agent\'s or machine\'s box (`nubeKey`)',
    scheme: 'owner',
    holder: "an integration given part of the account, or an agent's or machine's own code (any code in its box)",
    operations: 'scoped',
    routes:
      'MCP `/api/mcp` (`tools/list` shows only the tools it may call) and the sandbox terminal WebSocket, within its scope; a box holding a key nube minted (an agent\'s or machine\'s, and boxes forked from it) only when its scope covers that key',
    never:
      "an operation outside its scopes or resourceIds (403 `ScopeMissing`); a box holding a wider key (exec, files, terminal, SSH, fork, an agent's turns: 403 `ScopeMissing`, scope `holder:<agent|machine>:<id>`); a key wider than itself; E2B `/e2b/...`, libSQL, an agent's ACP WebSocket and the console's sign-in (full owner keys only); use after `expiresAt` (401 `KeyExpired`) or from outside `allowedIps`; with `workspaceIds`, resources of other workspaces (404, as another account's: reads, lists, creates) and new workspaces (403); another account's resources (404)",
  },
  {
    credential:
      'Console session cookie `__Host-nube_console` (Secure; over HTTPS, a trusted proxy\'s included) or `nube_console` (plain HTTP), with the session\'s CSRF token',
    holder: "a signed-in owner's browser, on nube's own pages",
    operations: '*',
    routes:
      'the console; every call also carries the CSRF token the sign-in answer gave the page (header `x-nube-csrf`, WebSocket subprotocol `nube-csrf.<token>`), and state-changing ones an Origin of this host',
    never:
      'a host or port a tenant controls (raw ports have their own address and host name, the console signs in only at its own host); anything without its CSRF token: a copied cookie reads nothing, mints no key, changes no credential',
  },
  {
    credential: 'Agent embed token `agt_...`',
    scheme: 'agent',
    holder: 'a public web page embedding one agent: anyone who opens it',
    operations: ['agents.get', 'agents.message', 'agents.try'],
    routes: 'none',
    never:
      "the agent's ACP WebSocket (a raw ACP connection can start commands as MCP servers), the owner's sessions (embed callers get sessions of their own), any other agent or route",
  },
  {
    credential: 'Fleet agent MESSAGE token `flt_tk_...`',
    scheme: 'fleetAgent',
    holder: "a public web page (the fleet widget) or the owner's backend",
    operations: ['fleet.message', 'fleet.messageStream', 'fleet.messages', 'fleet.publicKey'],
    routes: 'none',
    never: "conversations of other channels (Telegram chats: a private chat's id is its user's id), management, other fleet agents",
  },
  {
    credential: 'Fleet public key `flt_pk_...`',
    scheme: 'fleetPublic',
    holder: 'a browser reading one conversation, for minutes',
    operations: ['fleet.messages'],
    routes: 'none',
    never: 'another conversation; sending; it ends at expiry, when the token is rotated and when the fleet agent is deleted',
  },
  {
    credential: 'Fleet client credential `nube_cc_...`',
    scheme: 'client',
    holder: 'an integration that lists fleet agents (and their tokens)',
    operations: ['fleet.list'],
    routes: 'none',
    never: 'anything else',
  },
  {
    credential: 'Share token `shr_...`',
    scheme: 'share',
    holder: 'anyone the link was sent to',
    operations: ['documents.pdf'],
    routes:
      "`GET`/`HEAD /share/<token>` (the one file, or the one document's page), `GET /share/<token>/assets/<fileId>` (only the images that document shows), `?token=` (or as a bearer) on that document's PDF export",
    never: 'anything but the one file or document; it ends when revoked or expired',
  },
  {
    credential: 'Payment link token (the path of `/pay/<token>`)',
    holder: 'anyone the owner hands the link to: payers, the public',
    operations: [],
    routes:
      '`/pay/<token>` (the amount and description), `/pay/<token>/thanks` (the link\'s redirect or a thank-you page), `POST /pay/<token>/checkout` (a Stripe Checkout Session for that amount, 20 per minute per address); `POST /pay/<token>/confirm` also needs the operator key',
    never: "anything of the owner's but the link's amount and description; a payment without the provider's signed word or the operator's key",
  },
  {
    credential: 'Machine order token (the path of `/checkout/<token>`, from a create answered `checkoutUrl`)',
    holder: 'whoever pays for one machine order: the owner, or the payer it was forwarded to',
    operations: [],
    routes:
      "`GET /checkout/<token>` (the order's description, amount and status, and once paid its machine's id); `POST /checkout/<token>/confirm` also needs the operator key (`NUBE_CHECKOUT_OPERATOR_KEY`); with Stripe the payer pays on Stripe's page",
    never:
      "any API operation, MCP or WebSocket; the machine itself (its box, app, keys); another order; a payment without the provider's signed webhook or the operator's key",
  },
  {
    credential: 'Presigned file URL token (the path of `/blob/<token>`: `putUrl` of POST /files, `readUrl` of GET /files/{id})',
    holder: 'whoever the owner hands the URL to, until it expires (an hour for reads)',
    operations: [],
    routes:
      "a `putUrl`: `PUT /blob/<token>` with the bytes of its one pending file, once; a `readUrl`: `GET`/`HEAD /blob/<token>` of its one file while it is stored at the signed key",
    never:
      "another file; reading with an upload URL or uploading with a read URL; a second upload through the same URL; a file whose access was changed since (its key moved); any API operation, MCP or WebSocket",
  },
  {
    credential: 'Database token `nube_db_...`',
    scheme: 'database',
    holder: "an application's database client (libSQL `authToken`)",
    operations: ['databases.query'],
    routes: 'libSQL `/libsql/<id>/...` of its one database',
    never: 'another database, any other route',
  },
  {
    credential: 'LLM gateway credential `nube_llm_...`',
    holder: "an agent's (or fleet box's) own code, inside its sandbox",
    operations: [],
    routes: "the LLM gateway's own listener (on the sandbox bridge): `POST /v1/chat/completions` and `GET /v1/models`, from its own sandbox's address only; every other path there is 404",
    never: 'any API operation; use from any other sandbox or host; it ends when its agent is deleted or rebuilt',
  },
  {
    credential: 'E2B sandbox token `envdAccessToken` (from create, connect and get)',
    holder: "the E2B SDK's handle on one sandbox, and whatever code it is handed to",
    operations: [],
    routes:
      "envd of its one sandbox, as `X-Access-Token` with `E2b-Sandbox-Id` (or at `49983-<id>.<domain>`): Connect RPC `/process.Process/*` and `/filesystem.Filesystem/*`, `GET`/`POST /files`, `/health`, the code interpreter's `/execute` and `/contexts`; it signs that sandbox's file URLs",
    never:
      "another sandbox, the owner's own included; E2B's control plane (the owner key's); any API operation, MCP, WebSocket or libSQL; it lasts as long as its sandbox",
  },
  {
    credential: 'E2B sandbox token `trafficAccessToken`',
    holder: 'whoever calls the ports of a sandbox made with `allowPublicTraffic: false`',
    operations: [],
    routes:
      "that sandbox's ports at `<port>-<id>.<domain>`, as header `e2b-traffic-access-token`, the code interpreter's `/execute` and `/contexts` included (a port of the sandbox, as at E2B)",
    never: "envd (no commands through envd, no files, no signed URLs), its own sandbox's included; another sandbox's ports; anything the envd token may not reach",
  },
  {
    credential: 'SSH ticket',
    holder: 'whoever the owner hands one sandbox shell to, for 10 minutes',
    operations: [],
    routes:
      "the SSH gateway, user = that sandbox's id: a shell or command, SFTP, forwarding to what that sandbox reaches (`-L`) and ports listening inside it (`-R`)",
    never:
      "another sandbox; any API operation, MCP or WebSocket; another subsystem or channel kind; nube's host or other sandboxes through forwarding; it ends with `ssh-disable`",
  },
];
