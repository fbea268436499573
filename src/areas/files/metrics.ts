import { type Metrics, sharedRead } from '../../platform/metrics.js';
import type { FilesRepo } from './repo.js';
import { FILE_REGIONS } from './schemas.js';

/**
 * Bytes in the blob stores, from the files table (what was acknowledged, not a listing of the bucket).
 * The sum scans the table, so a read is reused for 30 s whatever the scrape interval.
 */
export function registerFileMetrics(metrics: Metrics, repo: FilesRepo): void {
  const read = sharedRead(() => repo.storedByRegion(), 30_000);
  const per = (pick: (r: { bytes: number; files: number }) => number) => async () => {
    const byRegion = new Map((await read()).map((r) => [r.region, r]));
    return FILE_REGIONS.map((region) => {
      const r = byRegion.get(region);
      return { labels: { region }, value: r ? pick(r) : 0 };
    });
  };
  metrics.sampled('nube_blob_stored_bytes', 'Bytes of files stored (live and in the trash) per region', ['region'], per((r) => r.bytes));
  metrics.sampled('nube_blob_stored_files', 'Files stored (live and in the trash) per region', ['region'], per((r) => r.files));
}
