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
PKGS="mmdebstrap bubblewrap uidmap nftables iproute2 util-linux libseccomp-dev gcc libc6-dev patch rsync xfsprogs btrfs-progs zstd"
PKGS="$PKGS chromium fonts-liberation fonts-dejavu-core poppler-utils ffmpeg"
# The SSH gateway copies the host's sftp-server into a sandbox for SFTP (and scp); the tests drive it
# with the real OpenSSH client. Sandbox networking's line, not the driver's.
PKGS="$PKGS openssh-sftp-server openssh-client"
for arg in "$@"; do
  case $arg in
    --gvisor) GVISOR=1 ;;
    # The test suite: a User-mode Linux kernel, where cgroup v2 limits are tried on a real v2 kernel.
    # pebble: the ACME test CA the TLS tests get certificates from.
    # postgresql, redis-server: the suite starts throwaway servers from them when none answers
    # (test/services.ts); installed only, never started or enabled as services here.
    # python3-pytest, mypy, python3-build, python3-venv: the Python SDK's tests (packages/python), its
    # type check, its wheel, and the fresh venv the wheel is installed into.
    # docker-registry, skopeo: the OCI registry on loopback the template tests pull from, and the tool
    # that pushes the images they make (test/templates/registry.ts); busybox-static: the shell and
    # tools of the musl image and of the base the Dockerfile tests build on (sh, httpd, su, wget);
    # musl-tools: musl-gcc, for the musl-linked program of that image.
    --test) PKGS="$PKGS user-mode-linux pebble postgresql redis-server python3-pytest mypy python3-build python3-venv docker-registry skopeo busybox-static musl-tools" ;;
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
  # PostgreSQL, Redis and the OCI registry are the test suite's, which starts its own: Debian's
  # packages would start and enable them as system services, which the user did not ask for.
  services=""
  for s in postgresql redis-server docker-registry; do
    case " $missing " in *" $s "*) services="$services $s" ;; esac
  done
  blocked=""
  if [ -n "$services" ] && [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# nube setup: no service starts while packages install\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    blocked=1
  fi
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing || { [ -n "$blocked" ] && rm -f /usr/sbin/policy-rc.d; exit 1; }
  [ -n "$blocked" ] && rm -f /usr/sbin/policy-rc.d
  if [ -n "$services" ] && [ -d /run/systemd/system ]; then
    for s in $services; do
      # postgresql@ units follow the umbrella unit.
      systemctl disable --now "$s" >/dev/null 2>&1 || true
    done
  fi
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
