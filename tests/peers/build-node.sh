#!/usr/bin/env bash
# Builds the node side of a real single-node cluster, so that a second run is instant:
#   - kube-controller-manager, kube-scheduler, kubelet (k8s.io/kubernetes v1.37.2, from ./node,
#     the same release and staging mapping as ./kube) and pause (the sandbox binary, pause.c
#     from the same module), cached under peers/node-<hash of node/go.mod, go.sum>;
#   - containerd, containerd-shim-runc-v2, ctr (containerd v2.4.2, from ./containerd), cached
#     under peers/containerd-<hash>;
#   - runc and the CNI plugins from Debian's packages (runc, containernetworking-plugins),
#     installed with apt-get when missing.
# Prints one bin folder on stdout (the node cache folder) holding all of them: containerd's,
# runc and cni/ (the CNI plugin folder) as symbolic links, refreshed at every run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/peers/lib.sh
. "$here/lib.sh"
need_go

ver=v1.37.2
ctrd_ver=v2.4.2
pause_ver=3.10.2
node_mod="$here/node"
ctrd_mod="$here/containerd"
out="$(peer_cache node "$node_mod")"
ctrd_out="$(peer_cache containerd "$ctrd_mod")"
cni_dir=/usr/lib/cni

elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

# --- kube-controller-manager, kube-scheduler, kubelet, pause ---------------------------------
if ! { [ -x "$out/kube-controller-manager" ] && [ -x "$out/kube-scheduler" ] \
       && [ -x "$out/kubelet" ] && [ -x "$out/pause" ]; }; then
  ld=$(kube_ldflags "$ver")
  tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cd "$node_mod"
  progress "node: downloading modules (cold: about a minute)"
  go mod download || die "go mod download failed in $node_mod: is the Go module proxy reachable?"
  # Same flags as build-kube.sh (cgo as the go command defaults, -trimpath), so the packages
  # the apiserver build left in GOCACHE are reused.
  for cmd in kube-controller-manager kube-scheduler kubelet; do
    t0=$(date +%s)
    progress "node: building $cmd $ver (cold: 5 to 20 minutes on 2 cores)"
    go build -trimpath -ldflags "$ld" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd" \
      || die "building $cmd failed (see the Go errors above)"
    progress "node: $cmd built in $(elapsed "$t0")"
  done
  command -v cc >/dev/null 2>&1 || die "a C compiler is missing: apt-get install gcc libc6-dev"
  kdir=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  progress "node: building pause $pause_ver (static, from $kdir/build/pause/linux/pause.c)"
  cc -Os -Wall -Werror -static -DVERSION="v$pause_ver" -o "$tmp/pause" \
    "$kdir/build/pause/linux/pause.c" || die "building pause failed (is libc6-dev installed?)"
  echo "$pause_ver" > "$tmp/pause.version"
  rm -rf "$out"
  mv -T "$tmp" "$out"
fi

# --- containerd 2 ------------------------------------------------------------------------------
if ! { [ -x "$ctrd_out/containerd" ] && [ -x "$ctrd_out/containerd-shim-runc-v2" ] \
       && [ -x "$ctrd_out/ctr" ]; }; then
  tmp="$ctrd_out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cd "$ctrd_mod"
  progress "containerd: downloading modules"
  go mod download || die "go mod download failed in $ctrd_mod: is the Go module proxy reachable?"
  ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$ctrd_ver"
  ld="$ld -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
  # Tags as containerd's Makefile sets them; no_btrfs: no btrfs here, and it needs its headers.
  tags="urfave_cli_no_docs no_btrfs"
  base=github.com/containerd/containerd/v2/cmd
  t0=$(date +%s)
  progress "containerd: building containerd $ctrd_ver (cold: about 5 minutes)"
  go build -trimpath -tags "$tags" -ldflags "$ld" -o "$tmp/containerd" "$base/containerd" \
    || die "building containerd failed (see the Go errors above)"
  progress "containerd: containerd built in $(elapsed "$t0")"
  t0=$(date +%s)
  progress "containerd: building containerd-shim-runc-v2 and ctr"
  # The shim is static and without gRPC, as containerd's Makefile builds it.
  CGO_ENABLED=0 go build -trimpath -tags "$tags no_grpc" -ldflags "$ld" \
    -o "$tmp/containerd-shim-runc-v2" "$base/containerd-shim-runc-v2" \
    || die "building containerd-shim-runc-v2 failed (see the Go errors above)"
  go build -trimpath -tags "$tags" -ldflags "$ld" -o "$tmp/ctr" "$base/ctr" \
    || die "building ctr failed (see the Go errors above)"
  progress "containerd: shim and ctr built in $(elapsed "$t0")"
  rm -rf "$ctrd_out"
  mv -T "$tmp" "$ctrd_out"
fi

# --- runc and CNI plugins from Debian ------------------------------------------------------------
if ! command -v runc >/dev/null 2>&1 || [ ! -x "$cni_dir/bridge" ]; then
  command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    || die "runc and the CNI plugins are missing: install Debian's runc and containernetworking-plugins"
  progress "node: installing runc and containernetworking-plugins with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc containernetworking-plugins >&2 \
    || { apt-get update -qq >&2 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc containernetworking-plugins >&2; } \
    || die "apt-get install runc containernetworking-plugins failed"
fi

for b in containerd containerd-shim-runc-v2 ctr; do
  ln -sfn "$ctrd_out/$b" "$out/$b"
done
ln -sfn "$(command -v runc)" "$out/runc"
ln -sfn "$cni_dir" "$out/cni"
progress "node: binaries in $out"
echo "$out"
