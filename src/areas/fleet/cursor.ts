// A cursor is an opaque, signed encoding of (conversation, sequence): a client cannot forge one, a
// cursor of another conversation is refused, and one whose messages were trimmed is detectable
// (`cursor_too_old`). Public read keys (`flt_pk_`) are signed the same way: stateless and short-lived.
import { hmacHex, safeEqual } from '../../platform/crypto.js';

export interface PublicKey {
  ownerId: string;
  fleetAgentId: string;
  groupId: string;
  expiresAt: number;
  generation: string;
}

export class Signer {
  constructor(private readonly key: string) {}

  private sig(kind: string, body: string): string {
    return hmacHex(this.key, `${kind}:${body}`).slice(0, 24);
  }

  cursor(fleetAgentId: string, groupId: string, seq: number): string {
    const body = Buffer.from(`${fleetAgentId}|${groupId}|${seq}`).toString('base64url');
    return `${body}.${this.sig('cursor', body)}`;
  }

  /** The sequence of a cursor of this conversation; null when forged, malformed or another conversation's. */
  readCursor(cursor: string, fleetAgentId: string, groupId: string): number | null {
    const [body, sig] = cursor.split('.');
    if (!body || !sig || !safeEqual(sig, this.sig('cursor', body))) return null;
    const [fa, g, s] = Buffer.from(body, 'base64url').toString().split('|');
    if (fa !== fleetAgentId || g !== groupId || !s || !/^\d+$/.test(s)) return null;
    return Number(s);
  }

  /** `generation` names the fleet agent's token it was minted under: rotating the token ends the key. */
  publicKey(p: PublicKey): string {
    const body = Buffer.from(JSON.stringify([p.ownerId, p.fleetAgentId, p.groupId, p.expiresAt, p.generation])).toString('base64url');
    return `flt_pk_${body}.${this.sig('pk', body)}`;
  }

  readPublicKey(key: string): PublicKey | null {
    const [body, sig] = key.slice('flt_pk_'.length).split('.');
    if (!body || !sig || !safeEqual(sig, this.sig('pk', body))) return null;
    try {
      const [ownerId, fleetAgentId, groupId, expiresAt, generation] = JSON.parse(Buffer.from(body, 'base64url').toString()) as [string, string, string, number, string];
      if (typeof generation !== 'string' || expiresAt <= Date.now()) return null;
      return { ownerId, fleetAgentId, groupId, expiresAt, generation };
    } catch {
      return null;
    }
  }
}
