#!/bin/sh
# Installs everything nube needs on Debian 12, as root: Debian packages (sandboxes, PDF export), goose
# (the `goose` agent template), npm packages and the `base` and `goose` sandbox templates. Idempotent: a second run changes nothing.
set -eu
cd "$(dirname "$0")/.."

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
  echo "nube needs Node.js 20 or newer (found: $(node --version 2>/dev/null || echo none))." >&2
  exit 1
fi

if [ "$(id -u)" = "0" ]; then
  # --gvisor: runsc too, for NUBE_SANDBOX_DRIVER=gvisor and for the test suite (it runs both drivers);
  # --test: user-mode-linux, the test suite's real cgroup v2 kernel.
  sh scripts/install-host-deps.sh --gvisor --test
  # goose, for the `goose` agent template (97 MB download once; NUBE_SETUP_GOOSE=0 skips it, and then
  # creating a goose agent answers 400 TemplateUnavailable saying how to install it).
  if [ "${NUBE_SETUP_GOOSE:-1}" != "0" ]; then
    sh scripts/install-goose.sh
  fi
else
  echo "not root: skipping Debian packages (sandboxes need root and scripts/install-host-deps.sh)" >&2
fi

if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
# nube runs as compiled JavaScript (dist/; `npm start` rebuilds it when src/ changed since) and the SDK
# is built to packages/sdk/dist for `npm pack`.
npm run build --silent
if [ "$(id -u)" = "0" ]; then
  sh scripts/build-templates.sh
fi
echo "nube is set up"
