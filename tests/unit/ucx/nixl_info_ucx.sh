#!/bin/sh
# nixl_info_ucx.sh NIXL_INFO - `nixl-info -d ucx` names the UCX it loaded,
# whether that UCX carries CUDA memory, its memory types and resources; `-d` of an unknown backend and a
# missing name fail with a message.  NIXL_PLUGIN_DIR comes from the test env.
set -u
info=$1
fail() { echo "FAIL: $*"; printf '%s\n' "$out"; exit 1; }
out=$("$info" -d ucx 2>&1)
rc=$?
case $out in *"could not be created"*) echo "SKIP: $out"; exit 77 ;; esac
[ "$rc" = 0 ] || fail "nixl-info -d ucx exited $rc"
printf '%s\n' "$out" | grep -Eq '^UCX [0-9]+\.[0-9]+' || fail "no UCX version line"
printf '%s\n' "$out" | grep -Eq 'CUDA memory: (yes|no)' || fail "no CUDA memory word"
printf '%s\n' "$out" | grep -Eq '^UCX memory types:( [a-z_0-9]+)* host( |$)' || fail "no memory types line naming host"
# UCX_TLS=tcp (the test env): tcp resources, and no shared-memory ones.
printf '%s\n' "$out" | grep -Eq '^UCX resources: .*tcp/lo' || fail "no resources line with tcp/lo"
printf '%s\n' "$out" | grep -E '^UCX resources:' | grep -Eq 'sysv|posix' && fail "UCX_TLS=tcp, yet sm resources listed"
out=$("$info" -d no_such_backend 2>&1)
[ $? = 1 ] || fail "unknown backend: want exit 1"
printf '%s\n' "$out" | grep -q "no no_such_backend backend" || fail "unknown backend: no message"
out=$("$info" -d 2>&1)
[ $? = 2 ] || fail "-d without a name: want exit 2"
echo "ok: $("$info" -d ucx 2>/dev/null | head -1)"
