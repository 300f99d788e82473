# shellcheck shell=bash
# Sourced by scripts/setup (and its test): which build targets a server needs.

# server_targets BUILD_DIR: prints the targets scripts/run-server needs: the binaries it starts and
# the console (web-ui). Fails, saying why, when BUILD_DIR has no web-ui target (CMake defines it
# only when node and the npm packages are there): a server without its console is no server.
server_targets() {
  local all
  all=$(ninja -C "$1" -t targets all) || return 1
  # Matched once the whole list is read: `ninja ... | grep -q` quits at the first match, ninja
  # dies of SIGPIPE, and under pipefail the target looks missing.
  if ! grep -q '^web-ui:' <<<"$all"; then
    echo "setup: $1 has no web-ui target: node or the npm packages were missing when CMake" \
      "configured it (npm ci, then cmake -B $1)" >&2
    return 1
  fi
  echo cabind cabin-agent cabin-sandbox cabin-vmm-wrap web-ui
}
