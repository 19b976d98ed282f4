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
version=$(sed -n 's#^\s*helm.sh/helm/v4 \(v[^ ]*\).*#\1#p' "$mod/go.mod" | head -n1)
[ -n "$version" ] || die "$mod/go.mod does not require helm.sh/helm/v4"
# The version is stamped as helm's Makefile does, so that `helm version` tells which one ran;
# it is checked below, with Helm's homes in a temporary folder (not the user's).
out=$(go_peer helm "$mod" helm helm.sh/helm/v4/cmd/helm "about 3-7 minutes on 2 cores" - \
  "-X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean")
home=$(mktemp -d)
got=$(HELM_CACHE_HOME="$home" HELM_CONFIG_HOME="$home" HELM_DATA_HOME="$home" \
  "$out/helm" version --template '{{.Version}}') || die "the built helm does not run"
rm -rf "$home"
[ "$got" = "$version" ] || die "the built helm reports $got, expected $version"
echo "$out"
