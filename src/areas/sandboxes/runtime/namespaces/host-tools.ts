// Programs a template takes from the host instead of from Debian: files that scripts/install-goose.sh
// puts on the host once (pinned version, checksums verified) and a template build copies into its root
// filesystem, checked again against the same sha256. Kept in sync with scripts/install-goose.sh (a
// test compares them).

export interface HostFile {
  /** Where the install script puts it on the host. */
  from: string;
  /** Where it goes in the template's root filesystem. */
  to: string;
  sha256: string;
  /** What installs it when it is missing (said in the build's error). */
  installedBy: string;
}

/** goose (block/goose, now AAIF), npm's @aaif/goose-binary-linux-x64: one glibc binary. */
export const GOOSE = {
  version: '1.52.0',
  npmPackage: '@aaif/goose-binary-linux-x64',
  /** sha256 of npm's tarball (97 MB) and of `package/bin/goose` in it (301 MB). */
  tarballSha256: 'de6ccf9c2584c4510aa45dc5a62a9d74feb623d9edd4e3fe436b6f6d6313603c',
  binarySha256: '6588bd326d97f6d3c868b9d1267c4d23b56d7a477ddb9b3748640c7982d4398b',
  hostPath: '/opt/nube/goose/1.52.0/goose',
} as const;

export const GOOSE_FILE: HostFile = {
  from: GOOSE.hostPath,
  to: '/usr/local/bin/goose',
  sha256: GOOSE.binarySha256,
  installedBy: 'scripts/install-goose.sh (as root; downloads 97 MB from the npm registry once)',
};
