# Helpers for the object-storage peer scripts (build-seaweedfs.sh, build-fake-gcs.sh,
# install-azurite.sh). Sourced after lib.sh. Progress goes to stderr; stdout carries results.

# need_go_for DIR: Go is on PATH, is 1.26 or newer, and is at least the version that DIR's
# go.mod asks for (a dependency can raise it, e.g. SeaweedFS needs 1.26.6). With
# GOTOOLCHAIN=local an older Go would fail later with a less obvious message.
need_go_for() {
  need_go
  local want have
  want=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$1/go.mod")
  have=$(go env GOVERSION | sed 's/^go//; s/[^0-9.].*$//')
  [ -n "$want" ] || die "$1/go.mod has no go directive"
  if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
    die "Go $have is too old for $1/go.mod, which needs Go $want or newer: update Go (https://go.dev/doc/install)"
  fi
}

# go_peer NAME MODDIR BINARY PACKAGE COLD_TIME [ARG [LDFLAGS]]: builds PACKAGE (a `tool` of the helper
# module in MODDIR) into the cache folder for NAME, keyed by MODDIR's go.mod and go.sum, checks
# that `BINARY ARG` runs (ARG `-`: a binary that cannot run alone, checked by its user), and
# prints that folder. A folder that already holds BINARY is reused at once. COLD_TIME only goes
# into the progress line; LDFLAGS are added to the link (e.g. -X stamps of the version).
go_peer() {
  local name=$1 mod=$2 bin=$3 pkg=$4 out tmp
  need_go_for "$mod"
  out="$(peer_cache "$name" "$mod")"
  if [ -x "$out/$bin" ]; then
    echo "$out"
    return 0
  fi
  tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  # `go list -deps` fetches only the modules that PACKAGE imports; `go mod download` would
  # also fetch every test-only dependency (for SeaweedFS about twice as many modules).
  progress "$name: downloading the modules $pkg needs"
  if ! (cd "$mod" && go list -deps "$pkg" >/dev/null 2>"$tmp/download.log"); then
    cat "$tmp/download.log" >&2
    die "downloading the modules for $pkg failed in $mod: is the Go module proxy reachable?"
  fi
  rm -f "$tmp/download.log"
  progress "$name: building $bin (cold: $5)"
  (cd "$mod" && go build -trimpath -ldflags "-s -w ${7:-}" -o "$tmp/$bin" "$pkg") \
    || die "building $bin from $pkg failed (see the Go errors above)"
  if [ "${6:-}" != - ]; then
    "$tmp/$bin" ${6:+"$6"} >/dev/null 2>&1 || die "the built $bin does not run"
  fi
  rm -rf "$out"
  mv -T "$tmp" "$out"
  trap - EXIT
  progress "$name: $bin in $out"
  echo "$out"
}
