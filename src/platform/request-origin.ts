// Where a browser sent a request: over HTTPS or not, and to which host. The console's cookie (its name,
// `Secure`) and its CSRF checks depend on it. X-Forwarded-Proto/-Host are believed only from a peer the
// operator trusts as its reverse proxy (NUBE_TRUST_PROXY): anyone else could write them. A node relaying
// a request (under the node credential) tells what it saw in its own header.
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { type AllowList, inAllowList, parseAllowList } from './outbound-address.js';

export interface RequestOrigin {
  /** The browser used HTTPS (to nube, or to the trusted proxy in front of it). */
  secure: boolean;
  /** The Host the browser addressed (with its port, as in a Host header). */
  host: string | undefined;
}

/** Set by the node that relays a request: `https://host` or `http://host` as that node saw it. */
export const NODE_ORIGIN_HEADER = 'x-nube-node-origin';

const lastOf = (v: string | string[] | undefined): string | undefined => {
  const s = Array.isArray(v) ? v[v.length - 1] : v;
  return s?.split(',').pop()?.trim() || undefined;
};

export class ProxyTrust {
  private readonly list: AllowList;

  constructor(readonly entries: readonly string[] = []) {
    this.list = parseAllowList(entries);
  }

  trusts(address: string | undefined): boolean {
    return !!address && inAllowList(address, this.list);
  }

  /** `relayed`: another node relayed the request (its credential was checked). */
  originOf(req: IncomingMessage, relayed: boolean): RequestOrigin {
    if (relayed) {
      const told = lastOf(req.headers[NODE_ORIGIN_HEADER]);
      const m = told ? /^(https?):\/\/(.+)$/.exec(told) : null;
      if (m) return { secure: m[1] === 'https', host: m[2] };
    }
    const direct = { secure: (req.socket as TLSSocket).encrypted === true, host: req.headers.host };
    if (!this.trusts(req.socket.remoteAddress)) return direct;
    const proto = lastOf(req.headers['x-forwarded-proto']);
    return { secure: proto ? proto === 'https' : direct.secure, host: lastOf(req.headers['x-forwarded-host']) ?? direct.host };
  }

  /** The header value a relaying node sends (see originOf). */
  static describe(o: RequestOrigin): string {
    return `${o.secure ? 'https' : 'http'}://${o.host ?? ''}`;
  }
}
