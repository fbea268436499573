import type { Migration } from 'kysely';
import type { AnyOperation, Services } from '../platform/operation.js';
import { accountArea } from './account/index.js';
import { auditArea } from './audit/index.js';
import type { AreaModule } from './area.js';
import type { PlatformDeps } from './deps.js';
import { sandboxesArea } from './sandboxes/index.js';
import { templatesArea } from './templates/index.js';
import { webArea } from './web/index.js';
import { llmArea } from './llm/index.js';
import { filesArea } from './files/index.js';
import { imagesArea } from './images/index.js';
import { share_tokensArea } from './share-tokens/index.js';
import { databasesArea } from './databases/index.js';
import { datasetsArea } from './datasets/index.js';
import { machinesArea } from './machines/index.js';
import { websitesArea } from './websites/index.js';
import { documentsArea } from './documents/index.js';
import { agentsArea } from './agents/index.js';
import { fleetArea } from './fleet/index.js';
import { webhooksArea } from './webhooks/index.js';
import { domainsArea } from './domains/index.js';
import { consoleArea } from './console/index.js';
import { paymentsArea } from './payments/index.js';
import { formsArea } from './forms/index.js';
import { volumesArea } from './volumes/index.js';
import { workspacesArea } from './workspaces/index.js';

/** Every area, in catalogue order. Services are created in this order (an area may use earlier ones). */
export const AREAS: AreaModule[] = [accountArea, workspacesArea, auditArea, webhooksArea, domainsArea, sandboxesArea, volumesArea, templatesArea, llmArea, webArea, filesArea, imagesArea, share_tokensArea, databasesArea, datasetsArea, machinesArea, paymentsArea, websitesArea, formsArea, documentsArea, agentsArea, fleetArea, consoleArea];

/** Every operation of the API: the one list REST, OpenAPI, MCP and the SDK derive from. */
export const operations: AnyOperation[] = AREAS.flatMap((a) => a.operations);

/** Every area's migrations; names sort globally. */
export const areaMigrations: Record<string, Migration> = Object.assign(
  {},
  ...AREAS.map((a) => a.migrations ?? {}),
);

/** Builds each area's service; areas register resolvers, gauges, job handlers and subscribers here. */
export async function createServices(deps: PlatformDeps): Promise<Services> {
  const services: Partial<Services> = {};
  for (const area of AREAS) Object.assign(services, await area.create?.(deps, services));
  return services as Services;
}
