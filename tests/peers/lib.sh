# Shared helpers for the peer build scripts. Progress goes to stderr; stdout carries results.
progress() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

need_go() {
  command -v go >/dev/null 2>&1 \
    || die "Go is missing: install Go 1.26 or newer (https://go.dev/doc/install) and put 'go' on PATH"
  local v
  v=$(go env GOVERSION)
  case "$v" in
    go1.2[6-9]*|go1.[3-9][0-9]*) ;;
    *) die "Go $v is too old: the control plane needs Go 1.26 or newer" ;;
  esac
}

cache_root() { echo "${BSL_SENTINEL_CACHE:-$HOME/.cache/bsl-sentinel}"; }

# peer_cache NAME DIR: the cache folder for a Go-built peer, keyed by its module files.
peer_cache() {
  local key
  key=$(cat "$2/go.mod" "$2/go.sum" | sha256sum | cut -c1-16)
  echo "$(cache_root)/peers/$1-$key"
}

need_cargo() {
  command -v cargo >/dev/null 2>&1 \
    || die "Rust is missing: install it with rustup (https://rustup.rs); bsl-sentinel needs Rust 1.89 or newer"
  local v
  v=$(rustc --version | awk '{print $2}')
  case "$v" in
    1.89*|1.9[0-9]*|1.[1-9][0-9][0-9]*) ;;
    *) die "rustc $v is too old: bsl-sentinel needs Rust 1.89 or newer (rustup update)" ;;
  esac
}

# The -ldflags that stamp a Kubernetes binary with its release, as `make` in kubernetes does, so
# that kubectl version and the node's kubeletVersion show it.
kube_ldflags() {
  local ver=$1 minor=${1#v1.} ld="-s -w" p
  minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  echo "$ld"
}
