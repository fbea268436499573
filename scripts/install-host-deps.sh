#!/bin/sh
# Host packages the namespaces sandbox driver needs (Debian 12). Idempotent; run as root.
# Kept in sync with HOST_PACKAGES in src/areas/sandboxes/runtime/namespaces/host-deps.ts.
set -eu
PKGS="mmdebstrap bubblewrap uidmap nftables iproute2 util-linux libseccomp-dev gcc libc6-dev patch rsync"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
fi
echo "host packages ok"
