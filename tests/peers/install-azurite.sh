#!/usr/bin/env bash
# Installs Azurite (Microsoft's Azure Storage emulator) from the npm registry at the version
# pinned in tests/peers/azurite/package.json and package-lock.json, into
# $HOME/.cache/bsl-sentinel/peers/azurite-<version>/ with npm's own cache under the same root,
# so that a second run is instant. Prints the path of the azurite-blob executable on stdout.
#
# Start it for a test (account devstoreaccount1 with its published key; SharedKey is checked):
#   azurite-blob --blobHost 127.0.0.1 --blobPort P -l DIR --skipApiVersionCheck --loose \
#     --disableTelemetry
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"

src="$here/azurite"
command -v node >/dev/null 2>&1 \
  || die "Node.js is missing: install Node.js 20 or newer (https://nodejs.org) with npm"
command -v npm >/dev/null 2>&1 \
  || die "npm is missing: install it with Node.js 20 or newer (https://nodejs.org)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || die "Node.js $(node --version) is too old: Azurite's dependencies need Node.js 20 or newer"

version=$(node -p "require('$src/package.json').dependencies.azurite")
out="$(cache_root)/peers/azurite-$version"
bin="$out/node_modules/.bin/azurite-blob"
# The lock copied into the folder tells whether it was installed from today's lock.
if [ -x "$bin" ] && cmp -s "$src/package-lock.json" "$out/package-lock.json"; then
  echo "$bin"
  exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$src/package.json" "$src/package-lock.json" "$tmp/"
progress "azurite: installing azurite@$version from the npm registry (cold: under a minute)"
npm ci --prefix "$tmp" --cache "$(cache_root)/npm" --omit=dev --no-audit --no-fund \
  --loglevel=error >&2 \
  || die "npm ci failed for azurite@$version: is the npm registry reachable?"
[ -x "$tmp/node_modules/.bin/azurite-blob" ] || die "azurite@$version installed no azurite-blob"
"$tmp/node_modules/.bin/azurite-blob" --version >/dev/null 2>&1 \
  || die "the installed azurite-blob does not run on Node.js $(node --version)"
rm -rf "$out"
mv -T "$tmp" "$out"
trap - EXIT
progress "azurite: azurite-blob in $out"
echo "$bin"
