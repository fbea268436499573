import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { OutboundClient } from '../../platform/outbound.js';
import { cosine, EMBED_BATCH, type EmbeddingsConfig, embed, embeddingHash, embeddingText } from './embeddings.js';
import type { FileRow } from './repo.js';
import type { File } from './schemas.js';
import type { FilesCore } from './core.js';

/**
 * Semantic search: every DONE file of the owner has a vector of its name, type and metadata, computed
 * by a job when the file becomes DONE or changes (so it survives restarts). A search embeds the query,
 * catches up on any file whose vector is missing or stale (e.g. files stored before an AI key was
 * configured), and ranks by cosine similarity in process.
 */
export class FileSearch {
  constructor(
    private readonly files: FilesCore,
    /** The embeddings endpoint to use for an owner: its own AI key, else the operator's, else none. */
    private readonly aiFor: (ownerId: string) => Promise<EmbeddingsConfig | undefined>,
    private readonly client: OutboundClient,
  ) {}

  private async config(ownerId: string): Promise<EmbeddingsConfig> {
    const ai = await this.aiFor(ownerId);
    if (!ai) {
      throw errors.badRequest(
        'semantic search needs an AI key: set yours with PUT /api/v2/account/ai-key (an OpenAI-compatible endpoint and key)',
        undefined,
        'AiKeyNotConfigured',
      );
    }
    return ai;
  }

  async search(p: Principal, q: string, limit: number): Promise<{ items: File[] }> {
    const ai = await this.config(p.ownerId);
    // A key narrowed to workspaces searches only their files.
    const ws = p.scope?.workspaceIds;
    const rows = (await this.files.repo.allDone(p.ownerId)).filter((r) => !ws || ws.has(r.workspace_id));
    const [queryVector] = await embed(this.client, ai, [q]);
    await this.catchUp(ai, rows);
    const scored = rows
      .filter((r) => r.embedding !== null)
      .map((r) => ({ r, score: cosine(queryVector!, JSON.parse(r.embedding as string) as number[]) }))
      .sort((a, b) => b.score - a.score)
      .slice(0, limit);
    return { items: scored.map((s) => this.files.view(s.r)) };
  }

  /** The job `files.embed`: idempotent (skips a file whose vector is current). */
  async embedFile(fileId: string): Promise<void> {
    const row = await this.files.repo.byId(fileId);
    if (row?.status !== 'DONE') return;
    const ai = await this.aiFor(row.owner_id).catch(() => undefined);
    if (!ai) return;
    await this.catchUp(ai, [row]);
  }

  private async catchUp(ai: EmbeddingsConfig, rows: FileRow[]): Promise<void> {
    const stale = rows
      .map((r) => {
        const text = embeddingText(r);
        return { r, text, hash: embeddingHash(text, ai.model) };
      })
      .filter((x) => x.r.embedding_hash !== x.hash);
    for (let i = 0; i < stale.length; i += EMBED_BATCH) {
      const batch = stale.slice(i, i + EMBED_BATCH);
      const vectors = await embed(
        this.client,
        ai,
        batch.map((b) => b.text),
      );
      for (const [j, b] of batch.entries()) {
        await this.files.repo.setEmbedding(b.r.id, vectors[j]!, b.hash);
        b.r.embedding = JSON.stringify(vectors[j]);
        b.r.embedding_hash = b.hash;
      }
    }
  }
}
