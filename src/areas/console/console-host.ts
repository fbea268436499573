// Where the console may set its cookie. A browser sends a host's cookies to every port of that host, and
// some hosts and ports are tenants' own servers: raw ports (`expose-raw`, any protocol, any reply),
// sites and sandbox ports (other host names, answered by nube's proxy with the tenant's content), custom
// domains (whose DNS the tenant controls). The console signs in only at its own host, never at one of
// those, and over plain HTTP only where no raw port listens on the same address.
import { isIP } from 'node:net';
import type { Config } from '../../platform/config-shape.js';
import type { RequestOrigin } from '../../platform/request-origin.js';

/** `host[:port]` (or `[v6]:port`) -> lower-case host name or address, no brackets. */
export function hostName(host: string | undefined): string {
  const h = (host ?? '').trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(1, h.indexOf(']'));
  const colon = h.indexOf(':');
  return colon === -1 || h.indexOf(':', colon + 1) !== -1 ? h : h.slice(0, colon);
}

const unmapped = (a: string) => a.replace(/^::ffff:/, '');

/** Whether raw ports bound at `bind` take connections made to `local` (the address a request came in on). */
export function rawListensOn(bind: string, local: string | undefined): boolean {
  if (bind === '0.0.0.0' || bind === '::') return true;
  const addr = unmapped(local ?? '');
  if (bind === 'localhost') return addr === '127.0.0.1' || addr === '::1';
  return unmapped(bind) === addr;
}

/** Why the console may not set its cookie for this request, in words; null when it may. */
export function consoleHostRefusal(config: Config, o: RequestOrigin, localAddress: string | undefined): string | null {
  const name = hostName(o.host);
  const raw = config.sandboxes.raw;
  const listen = config.host === '0.0.0.0' || config.host === '::' ? "nube's address" : `http://${config.host}:${config.port}`;
  const open = `open ${config.publicUrlFixed ? config.publicUrl : listen}/console`;
  if (!name) return 'the request names no host';
  if (name === raw.host.toLowerCase()) return `${name} is where raw ports, tenants' own servers, are announced (NUBE_RAW_HOST); ${open}`;
  if (config.publicUrlFixed) {
    const own = hostName(new URL(config.publicUrl).host);
    if (name !== own) return `the console's host is ${own} (NUBE_PUBLIC_URL), not ${name}; ${open}`;
  } else if (isIP(name) === 0 && name !== 'localhost') {
    // Without a public URL nube cannot tell its own names from a tenant's custom domain pointed at it.
    return `without NUBE_PUBLIC_URL the console signs in at an address or localhost only; set NUBE_PUBLIC_URL to the URL you open it at (${name})`;
  }
  if (!o.secure && rawListensOn(raw.bind, localAddress)) {
    return (
      `raw ports (tenants' own servers) listen on this address too (NUBE_RAW_BIND=${raw.bind}), and over plain HTTP a browser ` +
      'would send the console cookie to them: open the console over HTTPS (NUBE_HTTPS_PORT, or a proxy listed in NUBE_TRUST_PROXY) or give raw ports an address of their own'
    );
  }
  return null;
}
