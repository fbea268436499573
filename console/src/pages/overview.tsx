import { formatBytes, nube } from '../api.js';
import { ErrorText, Page, UsageBar, useLoad } from '../ui.js';

const count = (n: number) => n.toLocaleString();

export function OverviewPage(_: { sub: string[] }) {
  const { data, error } = useLoad(() => Promise.all([nube.account.get(), nube.account.usage()]));
  const [account, usage] = data ?? [];
  return (
    <Page title="Overview">
      <ErrorText error={error} />
      {account && usage && (
        <>
          <p>
            Plan <strong>{account.plan.title}</strong> ({account.plan.monthlyMxn} MXN a month) · period {usage.period} · trash kept{' '}
            {usage.trashRetentionDays} days
          </p>
          <div class="card">
            <h2>Usage against allowances</h2>
            <UsageBar label="Storage" used={usage.storageBytes.used} limit={usage.storageBytes.limit} format={formatBytes} />
            <UsageBar label="AI credits" used={usage.aiCredits.used} limit={usage.aiCredits.limit} format={count} />
            <UsageBar label="LLM tokens" used={usage.llmTokens.used} limit={usage.llmTokens.limit} format={count} />
            <UsageBar label="Databases" used={usage.databases.used} limit={usage.databases.limit} format={count} />
            <UsageBar label="Boxes (sandboxes)" used={usage.boxes.used} limit={usage.boxes.limit} format={count} />
            <UsageBar label="Simultaneous agents" used={usage.simultaneousAgents.used} limit={usage.simultaneousAgents.limit} format={count} />
          </div>
        </>
      )}
    </Page>
  );
}
