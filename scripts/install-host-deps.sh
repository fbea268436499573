#!/bin/sh
# Host packages the namespaces sandbox driver needs (Debian 12), plus runsc when
# NUBE_SANDBOX_DRIVER=gvisor (or --gvisor: the test suite runs both drivers), plus with --test what
# only the test suite uses. Idempotent; run as root.
# Kept in sync with HOST_PACKAGES / GVISOR_PACKAGES in src/areas/sandboxes/runtime/namespaces/host-deps.ts.
# The PDF export drives Debian's Chromium (never a browser downloaded by playwright) with fonts that
# cover Spanish; poppler-utils (pdfinfo, pdftotext, pdftoppm) is how the tests read PDFs back. That
# line belongs to the documents area, not the sandbox driver, so host-deps.ts does not list it.
set -eu
GVISOR=""
PKGS="mmdebstrap bubblewrap uidmap nftables iproute2 util-linux libseccomp-dev gcc libc6-dev patch rsync xfsprogs"
PKGS="$PKGS chromium fonts-liberation fonts-dejavu-core poppler-utils"
# The SSH gateway copies the host's sftp-server into a sandbox for SFTP (and scp); the tests drive it
# with the real OpenSSH client. Sandbox networking's line, not the driver's.
PKGS="$PKGS openssh-sftp-server openssh-client"
for arg in "$@"; do
  case $arg in
    --gvisor) GVISOR=1 ;;
    # The test suite: a User-mode Linux kernel, where cgroup v2 limits are tried on a real v2 kernel.
    # pebble: the ACME test CA the TLS tests get certificates from.
    --test) PKGS="$PKGS user-mode-linux pebble" ;;
  esac
done
if [ "${NUBE_SANDBOX_DRIVER:-}" = "gvisor" ]; then
  GVISOR=1
fi
# make and curl: install-static-sh.sh (below) builds the static sh sandboxes start commands with.
PKGS="$PKGS make curl"
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
# gVisor: runsc from bookworm-backports (0.0~20240729), not bookworm's own (0.0~20221219): the older
# one rejects statx with AT_NO_AUTOMOUNT (every command then needs a preloaded fix) and starts and
# runs commands slower on the ptrace platform. The backports suite is Debian's own; adding it
# installs nothing else from it (apt takes a backports package only when asked with -t).
if [ -n "$GVISOR" ]; then
  have=$(dpkg-query -W -f='${Version}' runsc 2>/dev/null || true)
  if [ -z "$have" ] || dpkg --compare-versions "$have" lt 0.0~20240729; then
    export DEBIAN_FRONTEND=noninteractive
    if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
      if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/nube-bookworm-backports.list
      fi
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends -t bookworm-backports runsc
    else
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends runsc
    fi
  fi
fi
# Optional: without it commands start slower on both drivers (nube doctor says so), so a failed
# download or build warns instead of stopping the setup.
sh "$(dirname "$0")/install-static-sh.sh" || echo "warning: the static sh was not built (see above); commands start slower (~10% of an exec on the namespaces driver, ~25% on gVisor). Retry: sh scripts/install-static-sh.sh (NUBE_DEBIAN_MIRROR=<mirror> for another Debian mirror)" >&2
echo "host packages ok"
