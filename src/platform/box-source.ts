// Which requests came through the box API (platform/box-api.ts), and from which bridge address.
import type { IncomingMessage } from 'node:http';

const BOX_SOURCE = Symbol('nube.boxSource');

/**
 * The bridge address a request came from through the box API, or undefined for any other listener
 * (the public one, HTTPS, an in-process inject). Only the box listener sets it, from the socket's peer:
 * addresses on the bridge cannot be forged (the sandbox network drops frames whose source is not their
 * port's own address), and no header can set it.
 */
export function boxSource(req: IncomingMessage): string | undefined {
  return (req as unknown as Record<symbol, string | undefined>)[BOX_SOURCE];
}

/** Only the box listener calls this, with the socket's peer address. */
export function markBoxSource(req: IncomingMessage, address: string): void {
  (req as unknown as Record<symbol, string>)[BOX_SOURCE] = address;
}
