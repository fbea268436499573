#!/bin/sh
# Host packages the namespaces sandbox driver needs (Debian 12), plus runsc when
# NUBE_SANDBOX_DRIVER=gvisor (or --gvisor: the test suite runs both drivers), plus with --test what
# only the test suite uses. Idempotent; run as root.
# Kept in sync with HOST_PACKAGES / GVISOR_PACKAGES in src/areas/sandboxes/runtime/namespaces/host-deps.ts.
# The PDF export drives Debian's Chromium (never a browser downloaded by playwright) with fonts that
# cover Spanish; poppler-utils (pdfinfo, pdftotext, pdftoppm) is how the tests read PDFs back. That
# line belongs to the documents area, not the sandbox driver, so host-deps.ts does not list it.
set -eu
PKGS="mmdebstrap bubblewrap uidmap nftables iproute2 util-linux libseccomp-dev gcc libc6-dev patch rsync xfsprogs"
PKGS="$PKGS chromium fonts-liberation fonts-dejavu-core poppler-utils"
# The SSH gateway copies the host's sftp-server into a sandbox for SFTP (and scp); the tests drive it
# with the real OpenSSH client. Sandbox networking's line, not the driver's.
PKGS="$PKGS openssh-sftp-server openssh-client"
for arg in "$@"; do
  case $arg in
    --gvisor) PKGS="$PKGS runsc" ;;
    # The test suite: a User-mode Linux kernel, where cgroup v2 limits are tried on a real v2 kernel.
    # pebble: the ACME test CA the TLS tests get certificates from.
    --test) PKGS="$PKGS user-mode-linux pebble" ;;
  esac
done
if [ "${NUBE_SANDBOX_DRIVER:-}" = "gvisor" ]; then
  PKGS="$PKGS runsc"
fi
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
