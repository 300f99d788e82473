#!/usr/bin/env bash
# What scripts/setup --server builds, worked out as setup does (scripts/lib/targets.sh, under
# pipefail) in this build dir: the console (web-ui) is among it, and no test binary.
set -euo pipefail
BUILD="$1"
# shellcheck source=scripts/lib/targets.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/targets.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

# A few times: the SIGPIPE that once hid web-ui depended on when grep quit.
for _ in 1 2 3 4 5; do
  line=$(server_targets "$BUILD") || fail "server_targets failed in $BUILD"
  [[ " $line " == *" web-ui "* ]] || fail "web-ui is not among the server's targets: $line"
  [[ " $line " == *" cabind "* ]] || fail "cabind is not among the server's targets: $line"
done

# shellcheck disable=SC2086  # one target a word
extra=$(ninja -C "$BUILD" -t commands $line | grep -oE ' -o (tests|bin/cabin-gateway)[^ ]*' || true)
[ -z "$extra" ] || fail "the server's targets build more than the server: $extra"
echo "ok: $line"
