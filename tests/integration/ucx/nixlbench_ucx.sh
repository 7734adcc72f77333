#!/bin/sh
# nixlbench_ucx.sh NIXLBENCH OP - nixlbench --backend ucx over tcp with
# ucx_perftest as each row's limit: every row's bytes are verified by
# nixlbench itself (a wrong byte exits 1); here, the limit line must name
# perftest and every row must carry a positive limit and ratio; batch 1
# (a WRITE's limit is ucp_put_lat there) and batches 2 and 4 (ucp_put_bw
# -O batch; a READ's is ucp_get -O batch throughout).  Skips (77)
# without ucx_perftest (Debian's ucx-utils).  NIXL_PLUGIN_DIR comes from
# the test env.
set -u
nb=$1
op=$2
pt=$(command -v ucx_perftest) || { echo "SKIP: no ucx_perftest on PATH (Debian's ucx-utils)"; exit 77; }
out=$(UCX_TLS=tcp "$nb" --backend ucx --op "$op" --block 256K:1M --batch 1:4 --iters 3 --warmup 1 --pairs 2 \
    --alloc malloc --perftest "$pt" 2>&1)
rc=$?
fail() { echo "FAIL: $*"; printf '%s\n' "$out"; exit 1; }
case $out in *"could not be created"*) echo "SKIP: ucx: $out" | head -3; exit 77 ;; esac
[ "$rc" = 0 ] || fail "nixlbench exited $rc"
printf '%s\n' "$out" | grep -q "^# limit: $pt -t ucp_" || fail "the limit line does not name $pt"
rows=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+[KM]$/ && $4 > 0 && $5 > 0 && $NF == "ucx.tcp"' | wc -l)
[ "$rows" = 9 ] || fail "want 9 rows (256K..1M x batch 1..4) with a perftest limit, a ratio and path ucx.tcp; got $rows"
printf '%s\n' "$out" | grep -E '^# limit|^ +[0-9]+[KM] '
echo "ok: $op, 9 rows against ucx_perftest"
