#!/bin/sh
# Puts goose (the `goose` agent template's program) on the host once: npm's
# @aaif/goose-binary-linux-x64 at a pinned version, the tarball and the binary checked against pinned
# sha256 sums. Downloads 97 MB (301 MB unpacked) the first time; a second run only checks. The `goose`
# sandbox template copies the binary into its root filesystem (a read-only lower layer every goose
# agent's sandbox shares). Kept in sync with src/areas/sandboxes/runtime/namespaces/host-tools.ts.
set -eu
VERSION=1.52.0
PACKAGE=@aaif/goose-binary-linux-x64
TARBALL_SHA256=de6ccf9c2584c4510aa45dc5a62a9d74feb623d9edd4e3fe436b6f6d6313603c
BINARY_SHA256=6588bd326d97f6d3c868b9d1267c4d23b56d7a477ddb9b3748640c7982d4398b
DEST=/opt/nube/goose/$VERSION

if [ -x "$DEST/goose" ] && echo "$BINARY_SHA256  $DEST/goose" | sha256sum -c --status; then
  echo "goose $VERSION ok"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading goose $VERSION ($PACKAGE, 97 MB)"
(cd "$tmp" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tgz=$(ls "$tmp"/*.tgz)
echo "$TARBALL_SHA256  $tgz" | sha256sum -c --status || { echo "goose tarball checksum mismatch" >&2; exit 1; }
tar -xzf "$tgz" -C "$tmp" package/bin/goose
echo "$BINARY_SHA256  $tmp/package/bin/goose" | sha256sum -c --status || { echo "goose binary checksum mismatch" >&2; exit 1; }
mkdir -p "$DEST"
install -m 0755 "$tmp/package/bin/goose" "$DEST/goose.part"
mv "$DEST/goose.part" "$DEST/goose"
echo "goose $VERSION installed at $DEST/goose"
