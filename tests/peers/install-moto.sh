#!/usr/bin/env bash
# Installs moto's S3 server from PyPI at the versions pinned in tests/peers/moto/requirements.txt,
# into a virtualenv under $HOME/.cache/bsl-sentinel/peers/moto-<hash of that file>/ with pip's
# cache under the same root, so that a second run is instant. Prints the path of moto_server on
# stdout.
#
# The tests use it as AWS itself: it answers a HEAD of a bucket with x-amz-bucket-region, which
# is how Velero finds the region of a BSL that names neither region nor s3Url. Start it with:
#   moto_server -H 127.0.0.1 -p P
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"

req="$here/moto/requirements.txt"
command -v python3 >/dev/null 2>&1 \
  || die "Python is missing: install Python 3.9 or newer (https://www.python.org) with its venv module"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
  || die "Python $(python3 --version 2>&1) is too old: moto needs Python 3.9 or newer"
key=$(sha256sum "$req" | cut -c1-16)
out="$(cache_root)/peers/moto-$key"
bin="$out/bin/moto_server"
# A virtualenv holds its own path, so it is built in place; the marker says it is whole.
if [ -x "$bin" ] && [ -e "$out/.installed" ]; then
  echo "$bin"
  exit 0
fi

rm -rf "$out"
python3 -m venv "$out" >&2 \
  || die "python3 -m venv failed: install Python's venv module (Debian: apt install python3-venv)"
progress "moto: installing moto's S3 server from PyPI (cold: under a minute)"
"$out/bin/pip" install --quiet --disable-pip-version-check --cache-dir "$(cache_root)/pip" \
  --no-deps -r "$req" >&2 \
  || die "pip install failed for moto: is PyPI reachable?"
"$out/bin/python" -c 'import moto.server, flask, flask_cors' \
  || die "the installed moto server does not import"
[ -x "$bin" ] || die "moto installed no moto_server"
touch "$out/.installed"
progress "moto: moto_server in $out"
echo "$bin"
