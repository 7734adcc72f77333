#!/bin/sh
# docs/env.md must hold exactly what `nixl-info -c --markdown` prints, between its markers,
# so the documented table cannot drift from the config table in the code.
# usage: check_env_md.sh NIXL_INFO DOCS_ENV_MD PLUGIN_DIR
# PLUGIN_DIR: the build's own backend modules (ucx is always one), and nothing
# else (no test modules).
set -eu
info=$1 doc=$2 plugins=$3
want=$(mktemp) have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
NIXL_PLUGIN_DIR=$plugins "$info" -c --markdown >"$want"
sed -n '/^<!-- BEGIN nixl-info -c --markdown -->$/,/^<!-- END nixl-info -c --markdown -->$/p' "$doc" |
    sed '1d;$d' >"$have"
if ! [ -s "$have" ]; then
    echo "docs/env.md: no block between the nixl-info markers" >&2
    exit 1
fi
if ! diff -u "$have" "$want"; then
    echo "docs/env.md is out of date: run scripts/regen-env-md.sh BUILD_DIR" >&2
    exit 1
fi
echo "docs/env.md matches nixl-info -c --markdown"
