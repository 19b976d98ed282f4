#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 12) from the seeds in fuzz/corpus, with
# cargo-fuzz on the nightly toolchain (libFuzzer, AddressSanitizer). Seeds are copied first, so
# a short run never grows the committed corpus; a crash leaves its input under
# fuzz/artifacts/ and fails the run. Prints "fuzz: N passed, M failed" for the summary.
#   bash fuzz/run.sh [SECONDS]        (a long run: bash fuzz/run.sh 3600)
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=tests/peers/lib.sh
. ../tests/peers/lib.sh
seconds=${1:-12}
cache=$(cache_root)
export CARGO_TARGET_DIR="$cache/fuzz-target"
rustup run nightly rustc --version >/dev/null 2>&1 \
  || die "the nightly toolchain is missing: rustup toolchain install nightly"
if [ ! -x "$cache/cargo-fuzz/bin/cargo-fuzz" ]; then
  progress "fuzz: installing cargo-fuzz from crates.io (cold: about 2 minutes)"
  cargo install --locked --quiet --root "$cache/cargo-fuzz" cargo-fuzz@0.13.2
fi
export PATH="$cache/cargo-fuzz/bin:$PATH"
progress "fuzz: building the targets with nightly and AddressSanitizer (cold: about 6 minutes; only the code they run is optimised, fuzz/Cargo.toml)"
cargo +nightly fuzz build -O
passed=0 failed=0
for target in $(cargo +nightly fuzz list); do
  work=$(mktemp -d)
  cp -r "corpus/$target/." "$work/" 2>/dev/null || true
  if cargo +nightly fuzz run -O "$target" "$work" -- -max_total_time="$seconds" \
      -max_len=65536 -rss_limit_mb=2048 >"$work.log" 2>&1; then
    runs=$(grep -o 'Done [0-9]* runs' "$work.log" | tail -1)
    # libFuzzer's last status line: edges covered (cov) and features (ft).
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$work.log" | tail -1)
    progress "fuzz: $target ok (${runs:-no summary} in ${seconds}s, ${cov:-no coverage line})"
    passed=$((passed + 1))
  else
    progress "fuzz: $target FAILED; its log:"
    tail -40 "$work.log" >&2
    failed=$((failed + 1))
  fi
  rm -rf "$work" "$work.log"
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
