import { ChromiumBrowser } from '../../browser/index.js';
import type { AreaModule } from '../area.js';
import { registerGeneration } from './generation.js';
import { documentsOperations } from './operations.js';
import { LlmReplies, replyMigrations } from './llm-replies.js';
import { LlmPageWriter } from './page-writer.js';
import { DocumentsRepo, documentWorkspaceMigrations, documentsMigrations } from './repo.js';
import { DocumentsService } from './service.js';
import { tableHolder } from '../../platform/workspaces.js';

export const documentsArea: AreaModule = {
  name: 'documents',
  operations: documentsOperations,
  migrations: { ...documentsMigrations, ...documentWorkspaceMigrations, ...replyMigrations },
  create(deps, other) {
    const { files, websites, llm } = other;
    if (!files || !websites)
      throw new Error('the documents area needs the files and websites services to be created first');
    const pdf = deps.config.pdf;
    // One warm browser per nube process, launched by the first export.
    const browser = new ChromiumBrowser({
      executablePath: pdf.chromiumPath,
      pages: pdf.pages,
      maxMemoryBytes: pdf.maxMemoryBytes,
      log: deps.log,
    });
    const repo = new DocumentsRepo(deps.store.db);
    // Pages from a prompt go through the LLM gateway's service (the account's AI key, else NUBE_LLM_*).
    const pageWriter = llm ? new LlmPageWriter(llm) : undefined;
    if (pageWriter) registerGeneration(deps.jobs, repo, new LlmReplies(deps.store.db), pageWriter);
    const documents = new DocumentsService({
      repo,
      files,
      websites,
      browser,
      pageWriter,
      jobs: deps.jobs,
      pdfTimeoutMs: pdf.timeoutMs,
      usage: deps.usage,
      workspaces: deps.workspaces,
    });
    deps.workspaces.register(
      tableHolder({ area: 'documents', param: 'id', deleteOperation: 'documents.delete', db: deps.store.db, table: 'documents', remove: (p, id) => documents.delete(p, id) }),
    );
    return { documents };
  },
  async close(services) {
    await services.documents.close();
  },
};
