#!/usr/bin/env bash
# Tests launch/get_cifar10.sh offline: a tiny local archive with the right layout must verify
# and unpack; a wrong md5, a missing archive or an archive lacking a batch must fail. curl and
# wget are shadowed by stubs so any network attempt fails the test.
#
#   bash tests/test_get_cifar10.sh [path/to/get_cifar10.sh]
set -euo pipefail

script="${1:-$(dirname "$0")/../launch/get_cifar10.sh}"
[[ -f "$script" ]] || { echo "FAIL: script $script not found" >&2; exit 1; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/mt_test_get_cifar10.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

files=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin
       test_batch.bin)

# Stubs that record any network attempt.
mkdir -p "$tmp/bin"
for tool in curl wget; do
  printf '#!/bin/sh\necho "%s called" >> "%s/network_calls"\nexit 99\n' "$tool" "$tmp" \
    > "$tmp/bin/$tool"
  chmod +x "$tmp/bin/$tool"
done
export PATH="$tmp/bin:$PATH"

# One valid 3073-byte record per file: label 3, then 3072 pixel bytes.
mkdir -p "$tmp/src/cifar-10-batches-bin"
for f in "${files[@]}"; do
  { printf '\003'; head -c 3072 /dev/zero; } > "$tmp/src/cifar-10-batches-bin/$f"
done
tar -czf "$tmp/good.tar.gz" -C "$tmp/src" cifar-10-batches-bin
good_md5="$(md5sum "$tmp/good.tar.gz" | cut -d' ' -f1)"

# 1. A good archive with its md5 unpacks and prints the hint.
if out="$(bash "$script" --archive "$tmp/good.tar.gz" --md5 "$good_md5" "$tmp/out" 2>&1)"; then
  for f in "${files[@]}"; do
    size="$({ wc -c < "$tmp/out/cifar-10-batches-bin/$f"; } 2>/dev/null || echo missing)"
    [[ "$size" == 3073 ]] || fail "good archive: $f has size '$size', expected 3073"
  done
  grep -q "MT_CIFAR10_DIR=.*cifar-10-batches-bin" <<<"$out" ||
    fail "good archive: output lacks the MT_CIFAR10_DIR hint: $out"
  grep -q -- "--data" <<<"$out" || fail "good archive: output lacks the --data hint: $out"
else
  fail "good archive was rejected: $out"
fi

# 2. A wrong md5 fails, says md5, and unpacks nothing.
if out="$(bash "$script" --archive "$tmp/good.tar.gz" --md5 0123456789abcdef0123456789abcdef \
            "$tmp/out2" 2>&1)"; then
  fail "wrong md5 was accepted: $out"
else
  grep -qi "md5" <<<"$out" || fail "wrong md5: message does not mention md5: $out"
  [[ ! -e "$tmp/out2/cifar-10-batches-bin" ]] || fail "wrong md5: archive was unpacked anyway"
fi

# 3. A missing archive fails and names it.
if out="$(bash "$script" --archive "$tmp/nope.tar.gz" --md5 "$good_md5" "$tmp/out3" 2>&1)"; then
  fail "missing archive was accepted: $out"
else
  grep -q "nope.tar.gz" <<<"$out" || fail "missing archive: message does not name it: $out"
fi

# 4. An archive lacking a batch fails and names the missing file.
rm "$tmp/src/cifar-10-batches-bin/data_batch_4.bin"
tar -czf "$tmp/partial.tar.gz" -C "$tmp/src" cifar-10-batches-bin
partial_md5="$(md5sum "$tmp/partial.tar.gz" | cut -d' ' -f1)"
if out="$(bash "$script" --archive "$tmp/partial.tar.gz" --md5 "$partial_md5" "$tmp/out4" \
            2>&1)"; then
  fail "archive lacking data_batch_4.bin was accepted: $out"
else
  grep -q "data_batch_4.bin" <<<"$out" ||
    fail "partial archive: message does not name the file: $out"
fi

# 5. A malformed --md5 is rejected before anything else.
if out="$(bash "$script" --archive "$tmp/good.tar.gz" --md5 xyz "$tmp/out5" 2>&1)"; then
  fail "malformed --md5 was accepted: $out"
fi

[[ ! -e "$tmp/network_calls" ]] || fail "the script tried the network: $(cat "$tmp/network_calls")"

if [[ "$failures" -ne 0 ]]; then
  echo "test_get_cifar10: $failures check(s) failed" >&2
  exit 1
fi
echo "test_get_cifar10: all checks passed"
