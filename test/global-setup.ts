// vitest's global setup: the PostgreSQL and Redis the suite needs (test/services.ts).
import { ensureServices } from './services.js';

export default function setup(): Promise<() => void> {
  return ensureServices();
}
