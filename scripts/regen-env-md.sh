#!/bin/sh
# regen-env-md.sh BUILD_DIR - rewrite the generated block of docs/env.md from
# `nixl-info -c --markdown` (tests/docs/check_env_md.sh checks they match).
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
block=$(mktemp)
trap 'rm -f "$block" "$block.new"' EXIT
# The build's own backend modules (ucx is always one), no test modules.
NIXL_PLUGIN_DIR=$build/src/backends "$build/tools/nixl-info" -c --markdown >"$block"
awk -v f="$block" '
    /^<!-- BEGIN nixl-info -c --markdown -->$/ { print; while ((getline l < f) > 0) print l; skip = 1; next }
    /^<!-- END nixl-info -c --markdown -->$/ { skip = 0 }
    !skip { print }
' docs/env.md >"$block.new"
cat "$block.new" >docs/env.md
echo "docs/env.md regenerated from $build/tools/nixl-info"
