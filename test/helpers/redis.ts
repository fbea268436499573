/** The suite's Redis (test/services.ts: the configured one, or a throwaway one it started). */
export const TEST_REDIS_URL = process.env.NUBE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
