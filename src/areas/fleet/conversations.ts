// Reading a conversation since a cursor: items each with its own cursor, the top-level cursor to store,
// and a gap when the client must reload the whole thread (its cursor's messages were trimmed, or the
// model started blank since: the box was lost without its memory).
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { Signer } from './cursor.js';
import type { FleetRepo } from './repo.js';
import { GROUP_ID_RE } from './schemas.js';

export interface MessagesQuery {
  groupId: string;
  since?: string;
  limit: number;
}

export async function readMessages(repo: FleetRepo, signer: Signer, p: Principal, fleetAgentId: string, q: MessagesQuery) {
  // A public key reads the one conversation it was issued for. The MESSAGE token is a browser's too (the
  // widget's page): it reads web conversations (`web-<uuid>`, whose random id the browser chose and
  // holds), never another channel's (a Telegram chat's id is its user's id, no secret). The owner reads any.
  if (p.scheme === 'fleetPublic' && p.credentialId !== q.groupId) throw errors.forbidden('this public key reads another conversation', 'CredentialNotAllowed');
  if (p.scheme === 'fleetAgent' && !GROUP_ID_RE.test(q.groupId)) {
    throw errors.forbidden('a fleet agent token reads web conversations (web-<uuid>) only; other channels\' conversations are the owner\'s to read', 'CredentialNotAllowed');
  }
  const conv = await repo.conversation(fleetAgentId, q.groupId);
  let after = 0;
  let gapReason: 'cursor_too_old' | 'context_reset' | undefined;
  if (q.since) {
    const seq = signer.readCursor(q.since, fleetAgentId, q.groupId);
    if (seq === null) throw errors.badRequest('since is not a cursor of this conversation', [{ path: ['query', 'since'], message: 'unknown cursor' }], 'InvalidCursor');
    const last = conv?.last_seq ?? 0;
    const first = conv?.first_seq ?? 1;
    if (seq > last || seq + 1 < first) gapReason = 'cursor_too_old';
    else if (conv?.reset_seq !== null && conv?.reset_seq !== undefined && seq < conv.reset_seq) gapReason = 'context_reset';
    else after = seq;
  }
  const rows = conv ? await repo.messages(fleetAgentId, q.groupId, after, q.limit + 1) : [];
  const hasMore = rows.length > q.limit;
  const items = rows.slice(0, q.limit).map((m) => ({
    id: m.id,
    cursor: signer.cursor(fleetAgentId, q.groupId, m.seq),
    role: m.role,
    text: m.text,
    turnId: m.turn_id,
    createdAt: new Date(m.created_at).toISOString(),
  }));
  const cursorSeq = items.length ? rows[items.length - 1]!.seq : gapReason ? null : after;
  return {
    items,
    cursor: cursorSeq === null ? null : signer.cursor(fleetAgentId, q.groupId, cursorSeq),
    hasMore,
    gap: gapReason !== undefined,
    ...(gapReason ? { gapReason } : {}),
    ...(gapReason === 'context_reset' && conv?.reset_at ? { resetAt: new Date(Number(conv.reset_at)).toISOString() } : {}),
  };
}
