// Resources held by one node besides sandboxes and databases (machines, agents, fleet agents): the
// pieces every such area repeats. Their jobs run on the node holding them (node-local job types, run
// pinned so a sandbox they create stays there), and requests addressing them by id in the path are
// forwarded to that node.
import type { JobHandler, JobQueue, HandlerOptions } from './jobs-contract.js';
import type { Locator } from './node-forward.js';
import { type NodeRegistry, runPinned } from './nodes.js';

/**
 * Registers `type` for this node's own jobs (`type@<node>`) and the plain type (jobs queued before
 * nodes existed); the handler runs pinned: a sandbox it creates is placed on this node.
 */
export function registerNodeJob<T>(jobs: JobQueue, nodes: NodeRegistry, type: string, handler: JobHandler<T>, opts?: HandlerOptions): void {
  for (const t of [type, nodes.jobType(type, null)]) jobs.register<T>(t, (payload, job) => runPinned(() => handler(payload, job)), opts);
}

/** A locator for `<prefix>/<id>...` paths whose id the pattern's first group captures. */
export function pathLocator(what: string, pattern: RegExp, locate: (id: string) => Promise<string | null | undefined>): Locator {
  return { what, match: (path) => pattern.exec(path)?.[1], locate };
}
