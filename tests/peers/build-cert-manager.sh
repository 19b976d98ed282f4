#!/usr/bin/env bash
# Builds cert-manager's controller and cainjector (github.com/cert-manager/cert-manager v1.21.2,
# from the Go module proxy) into a cache keyed by tests/peers/cert-manager (go.mod, go.sum and
# its Go sources), so that a second run is instant.
#
# Prints two lines on stdout, the last two:
#   bin=<folder holding cert-manager-controller and cert-manager-cainjector>
#   crds=<folder of cert-manager's CRD YAML, deploy/crds of the module in the module cache>
# Install the CRDs with `kubectl apply --server-side -f <crds>` (some are larger than the
# 256 KiB last-applied annotation of a client-side apply).
#
# Run them outside a cluster against a test apiserver (they listen on no port):
#   cert-manager-controller --kubeconfig=K [--cluster-resource-namespace=NS] [--namespace=NS]
#   cert-manager-cainjector --kubeconfig=K [--namespace=NS]
#
# go_peer (lib-storage.sh) is not used: it builds one binary per cache folder and keys the folder
# by go.mod and go.sum only, while this module builds two binaries from its own main packages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/peers/lib-storage.sh
. "$here/lib-storage.sh"

mod="$here/cert-manager"
need_go_for "$mod"
version=$(sed -n 's#^\s*github.com/cert-manager/cert-manager \(v[^ ]*\).*#\1#p' "$mod/go.mod" | head -n1)
[ -n "$version" ] || die "$mod/go.mod does not require github.com/cert-manager/cert-manager"
key=$(cat "$mod/go.mod" "$mod/go.sum" "$mod"/controller/*.go "$mod"/cainjector/*.go \
  "$mod"/internal/peer/*.go | sha256sum | cut -c1-16)
out="$(cache_root)/peers/cert-manager-$key"

crds() {
  local dir
  dir=$(cd "$mod" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager 2>/dev/null) || dir=""
  if [ -z "$dir" ] || [ ! -d "$dir/deploy/crds" ]; then
    (cd "$mod" && go mod download github.com/cert-manager/cert-manager) \
      || die "downloading github.com/cert-manager/cert-manager $version failed: is the Go module proxy reachable?"
    dir=$(cd "$mod" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  fi
  [ -f "$dir/deploy/crds/cert-manager.io_certificates.yaml" ] \
    || die "no deploy/crds in $dir: cert-manager $version does not ship its CRDs there"
  echo "$dir/deploy/crds"
}

if [ -x "$out/cert-manager-controller" ] && [ -x "$out/cert-manager-cainjector" ]; then
  echo "bin=$out"
  echo "crds=$(crds)"
  exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
# shellcheck disable=SC2064
trap "rm -rf '$tmp'" EXIT
start=$(date +%s)
progress "cert-manager $version: downloading the modules the controller and cainjector need"
if ! (cd "$mod" && go list -deps ./controller ./cainjector >/dev/null 2>"$tmp/download.log"); then
  cat "$tmp/download.log" >&2
  die "downloading the modules for cert-manager $version failed in $mod: is the Go module proxy reachable?"
fi
rm -f "$tmp/download.log"
for cmd in controller cainjector; do
  progress "cert-manager $version: building cert-manager-$cmd (cold: about 5-10 minutes each on 2 cores)"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$tmp/cert-manager-$cmd" "./$cmd") \
    || die "building cert-manager-$cmd failed (see the Go errors above)"
  got=$("$tmp/cert-manager-$cmd" --version) || die "the built cert-manager-$cmd does not run"
  [ "$got" = "$version" ] || die "cert-manager-$cmd reports $got, expected $version"
done
rm -rf "$out"
mv -T "$tmp" "$out"
trap - EXIT
progress "cert-manager $version: binaries in $out after $(( $(date +%s) - start ))s"
echo "bin=$out"
echo "crds=$(crds)"
