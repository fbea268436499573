/** Files under src/ that end up in dist/ (tests excluded), relative to `root`, sorted. */
export function sourceFiles(root: string): string[];
/** Whether a source file is copied as it is (not compiled). */
export function isAsset(rel: string): boolean;
/** Hash of the sources and tsconfigs that dist/ is compiled from. */
export function fingerprint(root: string): string;
/** The fingerprint dist/ was built from (dist/build-info.json), or undefined when there is no build. */
export function builtFingerprint(root: string): string | undefined;
