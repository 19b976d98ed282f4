#!/usr/bin/env bash
# Builds the real promtool (github.com/prometheus/prometheus v0.316.0, cmd/promtool, from the Go
# module proxy) into a cache keyed by tests/peers/prometheus/go.mod and go.sum, so that a second
# run is instant. Prints the folder holding `promtool` on stdout.
#
# Used by the monitoring tests: `promtool check rules FILE` and `promtool test rules TESTFILE`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/peers/lib-storage.sh
. "$here/lib-storage.sh"

mod="$here/prometheus"
need_go_for "$mod"
version=$(sed -n 's#^\s*github.com/prometheus/prometheus \(v[^ ]*\).*#\1#p' "$mod/go.mod" | head -n1)
[ -n "$version" ] || die "$mod/go.mod does not require github.com/prometheus/prometheus"
out="$(peer_cache promtool "$mod")"
if [ -x "$out/promtool" ]; then
  echo "$out"
  exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
# shellcheck disable=SC2064
trap "rm -rf '$tmp'" EXIT
start=$(date +%s)
pkg=github.com/prometheus/prometheus/cmd/promtool
progress "promtool $version: downloading the modules cmd/promtool needs"
if ! (cd "$mod" && go list -deps "$pkg" >/dev/null 2>"$tmp/download.log"); then
  cat "$tmp/download.log" >&2
  die "downloading the modules for promtool $version failed in $mod: is the Go module proxy reachable?"
fi
rm -f "$tmp/download.log"
progress "promtool $version: building promtool (cold: about 7 minutes on 2 cores)"
# Stamp the module version, so that `promtool --version` tells which one ran.
(cd "$mod" && go build -trimpath \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
  -o "$tmp/promtool" "$pkg") \
  || die "building promtool $version failed (see the Go errors above)"
"$tmp/promtool" --version >/dev/null 2>&1 || die "the built promtool does not run"
rm -rf "$out"
mv -T "$tmp" "$out"
trap - EXIT
progress "promtool $version: promtool in $out after $(( $(date +%s) - start ))s"
echo "$out"
