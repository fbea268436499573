#!/bin/sh
# Builds the static /bin/sh of sandboxes once: Debian bookworm's dash 0.5.12-2 from its source and
# Debian's own patches (tarballs checked against pinned sha256 sums), configured as Debian's
# debian/rules configures it, linked statically: no dynamic loader, no relocations at start. On
# gVisor's ptrace platform every page a new process touches and every system call the loader makes
# is a trap into the sentry: a `sh -c` of the dynamic dash costs ~25% more than this one; on the
# namespaces driver an exec `true` costs ~10% more. Both drivers run it in place of the sandbox's
# /bin/sh only while that file is byte for byte Debian's dash 0.5.12-2 (the reference copy saved next
# to it, from Debian's package, checked too): see nube-agent.c (gVisor) and nube-helper.c
# (namespaces). Without it everything works, commands start slower. A second run only checks.
# Kept in sync with STATIC_SH_DIR in src/areas/sandboxes/runtime/static-sh.ts: BUILD names this
# recipe (what nube adds: getpwnam, the process name, the wait mode), so a changed recipe builds into a
# new dir.
set -eu
VERSION=0.5.12-2
ORIG_SHA256=6a474ac46e8b0b32916c4c60df694c82058d3297d8b385b74508030ca4a8f28a
DEBIAN_SHA256=bddd9129215eb60f4cc43a0ffdcc42d8f25e0bd09730520d599a2b7bc492e375
DEB_SHA256=33ea40061da2f1a861ec46212b2b6a34f0776a049b1a3f0abce2fb8cb994258f
# /bin/dash of that package: what a sandbox's /bin/sh must be for the static one to stand in for it.
REFERENCE_SHA256=f5adb8bf0100ed0f8c7782ca5f92814e9229525a4b4e0d401cf3bea09ac960a6
MIRROR=${NUBE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILD=n4
DEST=/opt/nube/dash/$VERSION-$BUILD
HERE=$(cd "$(dirname "$0")/.." && pwd)

if [ -x "$DEST/sh" ] && echo "$REFERENCE_SHA256  $DEST/dash.ref" | sha256sum -c --status; then
  echo "static sh (dash $VERSION, build $BUILD) ok"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() {
  curl -fsS --retry 3 -o "$tmp/$1" "$MIRROR/pool/main/d/dash/$1" || { echo "could not download $MIRROR/pool/main/d/dash/$1" >&2; exit 1; }
  echo "$2  $tmp/$1" | sha256sum -c --status || { echo "$1: checksum mismatch" >&2; exit 1; }
}
echo "building a static sh from dash $VERSION (Debian's source, 0.3 MB)"
fetch dash_0.5.12.orig.tar.gz "$ORIG_SHA256"
fetch "dash_$VERSION.debian.tar.xz" "$DEBIAN_SHA256"
fetch "dash_${VERSION}_amd64.deb" "$DEB_SHA256"
mkdir "$tmp/deb"
dpkg-deb -x "$tmp/dash_${VERSION}_amd64.deb" "$tmp/deb"
echo "$REFERENCE_SHA256  $tmp/deb/bin/dash" | sha256sum -c --status || { echo "dash package: /bin/dash checksum mismatch" >&2; exit 1; }
cd "$tmp"
tar -xzf dash_0.5.12.orig.tar.gz
cd dash-0.5.12
tar -xJf "../dash_$VERSION.debian.tar.xz"
for p in $(grep -v '^#' debian/patches/series); do patch -s -p1 < "debian/patches/$p"; done
# The patches touch configure.ac and Makefile.am (large files, which x86-64 has anyway; priv.c, the
# privileged mode): priv.c goes into the generated Makefile.in by hand, and the generated files are
# made newer than their sources, so no autotools are needed.
sed -i 's/parser\.\$(OBJEXT) redir\.\$(OBJEXT)/parser.$(OBJEXT) priv.$(OBJEXT) redir.$(OBJEXT)/; s/parser\.c redir\.c/parser.c priv.c redir.c/' src/Makefile.in
grep -q 'priv\.\$(OBJEXT)' src/Makefile.in || { echo "dash: could not add priv.c to src/Makefile.in" >&2; exit 1; }
touch aclocal.m4
sleep 1
touch configure Makefile.in src/Makefile.in config.h.in
# debian/rules' flags. A static glibc cannot look users up through NSS: getpwnam (~user) reads
# /etc/passwd itself (static-sh-getpwnam.c), and configure is told it exists (its link test fails
# under --enable-static's --fatal-warnings).
gcc -O2 -Wall -c -o getpwnam.o "$HERE/src/areas/sandboxes/runtime/static-sh-getpwnam.c"
gcc -O2 -Wall -c -o comm.o "$HERE/src/areas/sandboxes/runtime/static-sh-comm.c"
# The wait mode (a prepared command's execve made before the command is known): static-sh-wait.c.
gcc -O2 -Wall -c -o wait.o "$HERE/src/areas/sandboxes/runtime/static-sh-wait.c"
./configure -q --disable-fnmatch --disable-lineno --disable-glob --enable-static ac_cv_func_getpwnam=yes CFLAGS=-O2 >/dev/null
make -s LIBS="$tmp/dash-0.5.12/getpwnam.o $tmp/dash-0.5.12/comm.o $tmp/dash-0.5.12/wait.o" >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; exit 1; }
strip src/dash
mkdir -p "$DEST"
install -m 0755 src/dash "$DEST/sh.part"
install -m 0644 "$tmp/deb/bin/dash" "$DEST/dash.ref.part"
mv "$DEST/sh.part" "$DEST/sh"
mv "$DEST/dash.ref.part" "$DEST/dash.ref"
echo "static sh (dash $VERSION, build $BUILD) installed at $DEST/sh"
