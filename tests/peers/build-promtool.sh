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
version=$(sed -n 's#^\s*github.com/prometheus/prometheus \(v[^ ]*\).*#\1#p' "$mod/go.mod" | head -n1)
[ -n "$version" ] || die "$mod/go.mod does not require github.com/prometheus/prometheus"
# Stamp the module version, so that `promtool --version` tells which one ran.
go_peer promtool "$mod" promtool github.com/prometheus/prometheus/cmd/promtool \
  "about 7 minutes on 2 cores" --version "-X github.com/prometheus/common/version.Version=$version"
