// Pages from a prompt as a durable job: the document row carries the generation's id and status, the job
// queue carries the work, so a restart of nube picks the job up again (its lease released at shutdown,
// or expired after a crash). The job's result lands only while its generation is still the document's
// current one: a PATCH with sections or a new prompt in the meantime wins. The LLM's reply is kept as
// soon as it arrives (llm-replies.ts), so a run cut after it came does not ask the LLM again.
import { cutShort, type JobContext, type JobQueue } from '../../platform/jobs.js';
import type { LlmReplies } from './llm-replies.js';
import { GenerationError, type PageWriter } from './page-writer.js';
import type { DocumentsRepo } from './repo.js';
import { normalizeSections } from './sections.js';

export const GENERATE_JOB = 'documents.generate';

export interface GenerateJob {
  documentId: string;
  ownerId: string;
  generationId: string;
  /** The scoped key (with caps) whose call asked for the pages: its tokens count toward its llmTokens cap. */
  keyId?: string;
}

export const generateJobKey = (documentId: string) => `${GENERATE_JOB}:${documentId}`;

/** Three attempts, 2 s then 4 s apart: an upstream hiccup is retried, a dead upstream fails visibly soon. */
export const GENERATE_JOB_OPTIONS = {
  maxAttempts: 3,
  backoff: (attempt: number) => 2000 * attempt,
  // An LLM writing 20 pages can take minutes; the lease is renewed every third of this while it runs.
  leaseMs: 120_000,
  concurrency: 4,
};

/** A generation that runs longer than this fails (and is retried like an upstream timeout). */
const GENERATE_TIMEOUT_MS = 300_000;

export function registerGeneration(jobs: JobQueue, repo: DocumentsRepo, replies: LlmReplies, writer: PageWriter): void {
  jobs.register<GenerateJob>(
    GENERATE_JOB,
    async (p, job: JobContext<GenerateJob>) => {
      const d = await repo.owned(p.ownerId, p.documentId);
      const g = d?.generation;
      if (!d || !g || g.id !== p.generationId || g.status === 'done' || g.status === 'failed') {
        await replies.drop(p.generationId);
        return;
      }
      const step = (status: 'queued' | 'running' | 'failed', error: string | null) =>
        repo.advanceGeneration(p.ownerId, p.documentId, p.generationId, { status, error, now: Date.now() });
      await step('running', g.error);
      let sections: ReturnType<typeof normalizeSections>;
      const timeout = AbortSignal.timeout(GENERATE_TIMEOUT_MS);
      try {
        // A reply that came before an earlier run was cut is used again: the LLM is asked once.
        let reply = await replies.get(p.ownerId, p.generationId);
        if (reply === null) {
          reply = await writer.ask(p.ownerId, d.prompt ?? '', {
            name: d.name,
            lang: typeof d.metadata.lang === 'string' ? d.metadata.lang : 'es',
            signal: AbortSignal.any([job.signal, timeout]),
            keyId: p.keyId,
          });
          await replies.keep({ generationId: p.generationId, ownerId: p.ownerId, documentId: p.documentId, reply });
        }
        sections = normalizeSections(writer.pages(reply, d.name));
      } catch (e) {
        const reason = timeout.aborted
          ? `the LLM did not answer within ${GENERATE_TIMEOUT_MS / 1000} s`
          : (e as Error).message.slice(0, 1000);
        if (cutShort(job)) {
          // nube is stopping (or lost the lease): the job runs again, here or on the next start.
          await step('queued', 'interrupted by a restart of nube; will run again').catch(() => {});
          throw e;
        }
        const transient = timeout.aborted || (e instanceof GenerationError && !e.permanent);
        const permanent = !transient || job.attempts >= job.maxAttempts;
        if (permanent) {
          await step('failed', reason);
          await replies.drop(p.generationId);
          return;
        }
        await step('queued', `attempt ${job.attempts} of ${job.maxAttempts} failed (${reason}); retrying`);
        throw e;
      }
      await repo.advanceGeneration(p.ownerId, p.documentId, p.generationId, {
        status: 'done',
        error: null,
        now: Date.now(),
        sections,
      });
      await replies.drop(p.generationId);
    },
    GENERATE_JOB_OPTIONS,
  );
}
