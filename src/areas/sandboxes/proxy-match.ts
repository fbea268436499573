/** What the port proxy matched in a Host: a port host or a sandbox domain (sandbox and port known), or a domain whose target is looked up (a machine's app). */
export type Match = { id: string; port: number; domain?: boolean } | { via: Promise<{ sandboxId: string; port: number } | null> };
