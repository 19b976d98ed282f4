#!/usr/bin/env bash
# Builds the real Helm CLI (helm.sh/helm/v4 v4.3.2, cmd/helm, from the Go module proxy) into a
# cache keyed by tests/peers/helm/go.mod and go.sum, so that a second run is instant.
# Prints the folder holding `helm` on stdout.
#
# Helm keeps its state in the cluster (a Secret per release in the release's namespace) and
# its own files under HELM_CACHE_HOME, HELM_CONFIG_HOME and HELM_DATA_HOME: point those at a
# temporary folder in tests so that nothing of the user's Helm set-up is read or written.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/peers/lib-storage.sh
. "$here/lib-storage.sh"

mod="$here/helm"
need_go_for "$mod"
version=$(sed -n 's#^\s*helm.sh/helm/v4 \(v[^ ]*\).*#\1#p' "$mod/go.mod" | head -n1)
[ -n "$version" ] || die "$mod/go.mod does not require helm.sh/helm/v4"
out="$(peer_cache helm "$mod")"
if [ -x "$out/helm" ]; then
  echo "$out"
  exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
# shellcheck disable=SC2064
trap "rm -rf '$tmp'" EXIT
start=$(date +%s)
progress "helm $version: downloading the modules cmd/helm needs"
if ! (cd "$mod" && go list -deps helm.sh/helm/v4/cmd/helm >/dev/null 2>"$tmp/download.log"); then
  cat "$tmp/download.log" >&2
  die "downloading the modules for helm $version failed in $mod: is the Go module proxy reachable?"
fi
rm -f "$tmp/download.log"
progress "helm $version: building helm (cold: about 3-7 minutes on 2 cores)"
# The version is stamped as helm's Makefile does, so that `helm version` tells which one ran.
(cd "$mod" && go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
  -o "$tmp/helm" helm.sh/helm/v4/cmd/helm) \
  || die "building helm $version failed (see the Go errors above)"
got=$(HELM_CACHE_HOME="$tmp/home" HELM_CONFIG_HOME="$tmp/home" HELM_DATA_HOME="$tmp/home" \
  "$tmp/helm" version --template '{{.Version}}') || die "the built helm does not run"
[ "$got" = "$version" ] || die "the built helm reports $got, expected $version"
rm -rf "${tmp:?}/home"
rm -rf "$out"
mv -T "$tmp" "$out"
trap - EXIT
progress "helm $version: helm in $out after $(( $(date +%s) - start ))s"
echo "$out"
