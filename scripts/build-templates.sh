#!/bin/sh
# Builds sandbox templates ahead, as root (scripts/setup.sh runs it). The first sandbox on a host would
# otherwise wait for its template, a root filesystem built from Debian packages (minutes); here the
# progress is printed. A template whose current recipe is built already is only checked (no rebuild).
# NUBE_SETUP_TEMPLATES="base code-interpreter" builds more, an empty value none; NUBE_DATA_DIR and
# NUBE_TEMPLATES_DIR say where, as for `npm start`.
set -eu
cd "$(dirname "$0")/.."
# `goose` (base plus the goose binary, seconds) only when scripts/install-goose.sh put goose on the host.
default=base
[ -x /opt/nube/goose/1.52.0/goose ] && default="base goose"
for t in ${NUBE_SETUP_TEMPLATES-$default}; do
  npm run --silent nube -- templates build "$t"
done
