// The gateway's limits on failed logins (issue 27 item 10), against a backend that knows one ticket per
// sandbox: refusals come at once (an address past its budget is cut before the key exchange), and they
// fall on the client that failed (its address on that sandbox, that ticket), not on other clients
// behind the same address, nor on a sandbox's own users while others guess at it from elsewhere.
import ssh2 from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryRateLimiter } from '../../../platform/limits.js';
import { SSH_AUTH_LIMITS } from './ssh-auth-limits.js';
import { type SshBackend, SshGateway } from './ssh-gateway.js';

const TICKETS: Record<string, string> = { sbx_a: 'ticket-a', sbx_b: 'ticket-b', sbx_c: 'ticket-c' };
const quiet = { info() {}, warn() {}, debug() {}, error() {} };

function backend(): SshBackend {
  const key = ssh2.utils.generateKeyPairSync('ed25519').private;
  return {
    core: {
      deps: {
        config: { sandboxes: { sshPort: 0, raw: { bind: '127.0.0.1' } } },
        log: quiet,
        rateLimiter: new MemoryRateLimiter(),
        secretBox: { open: (s: string) => s, seal: (s: string) => s },
      },
    },
    repo: { hostKey: async () => key, putHostKey: async (_n: string, s: string) => s },
    authenticate: async (user: string, password: string) => TICKETS[user] === password,
  } as unknown as SshBackend;
}

interface Outcome {
  /** `in`: authenticated; `refused`: authentication failed; `cut`: closed before authenticating. */
  result: 'in' | 'refused' | 'cut';
  ms: number;
}

describe('SSH gateway: failed logins', () => {
  let gw: SshGateway;
  beforeAll(async () => {
    gw = new SshGateway(backend());
    await gw.start();
  });
  afterAll(() => gw?.close());

  function login(from: string, user: string, password: string): Promise<Outcome> {
    const started = Date.now();
    return new Promise((resolve) => {
      const c = new ssh2.Client();
      let result: Outcome['result'] = 'cut';
      let authTried = false;
      c.on('ready', () => {
        result = 'in';
        c.end();
      });
      c.on('handshake', () => {
        authTried = true;
      });
      c.on('error', (e: Error & { level?: string }) => {
        if (e.level === 'client-authentication' || (authTried && /authentication/i.test(e.message))) result = 'refused';
      });
      c.on('close', () => resolve({ result, ms: Date.now() - started }));
      c.connect({ host: '127.0.0.1', port: gw.port, localAddress: from, username: user, password, readyTimeout: 20_000, tryKeyboard: false });
    });
  }

  it('a client past its budget on a sandbox is refused there at once, even with the right ticket; its NAT neighbours are not', async () => {
    const nat = '127.0.1.1';
    for (let i = 0; i <= SSH_AUTH_LIMITS.target.points; i++) expect((await login(nat, 'sbx_a', `guess${i}`)).result).toBe('refused');
    const blocked = await login(nat, 'sbx_a', TICKETS.sbx_a!);
    expect(blocked.result).toBe('refused');
    expect(blocked.ms).toBeLessThan(2000);
    // Another client behind the same address, on its own sandbox; and sbx_a's user somewhere else.
    expect((await login(nat, 'sbx_b', TICKETS.sbx_b!)).result).toBe('in');
    expect((await login('127.0.1.2', 'sbx_a', TICKETS.sbx_a!)).result).toBe('in');
  });

  it('a ticket retried after it stopped working is refused from any address; the sandbox still opens with a good one', async () => {
    const stale = 'ticket-c-expired';
    for (let i = 0; i <= SSH_AUTH_LIMITS.ticket.points; i++) {
      expect((await login(`127.0.2.${i + 1}`, 'sbx_c', stale)).result).toBe('refused');
    }
    const again = await login('127.0.2.99', 'sbx_c', stale);
    expect(again.result).toBe('refused');
    expect((await login('127.0.2.99', 'sbx_c', TICKETS.sbx_c!)).result).toBe('in');
  });

  it('guesses spread over many addresses at one sandbox: each guessing address is refused there, its own users are not', async () => {
    const target = 'sbx_b';
    let n = 0;
    for (; n < SSH_AUTH_LIMITS.sandbox.points; n++) expect((await login(`127.0.3.${n + 1}`, target, `spread${n}`)).result).toBe('refused');
    // The sandbox is past its budget: an address that fails on it once more is refused there at once.
    expect((await login('127.0.3.1', target, 'spread-again')).result).toBe('refused');
    expect((await login('127.0.3.1', target, TICKETS[target]!)).result).toBe('refused');
    // A client that never failed on it still gets in.
    expect((await login('127.0.3.250', target, TICKETS[target]!)).result).toBe('in');
  });

  it('an address spraying guesses is cut at the TCP accept, before any key exchange, and quickly', async () => {
    const sprayer = '127.0.4.1';
    for (let i = 0; i <= SSH_AUTH_LIMITS.address.points; i++) {
      expect((await login(sprayer, `sbx_s${i}`, 'x')).result).toBe('refused');
    }
    const cut = await login(sprayer, 'sbx_a', TICKETS.sbx_a!);
    expect(cut.result).toBe('cut');
    expect(cut.ms).toBeLessThan(1000);
    expect((await login('127.0.4.2', 'sbx_a', TICKETS.sbx_a!)).result).toBe('in');
  }, 60_000);
});
