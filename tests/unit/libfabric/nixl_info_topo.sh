#!/bin/sh
# nixl_info_topo.sh NIXL_INFO P5_XML - `nixl-info -t` over tcp (lo) with the
# p5 fixture as the topology: the rails and every GPU's line are printed.
set -u
info=$1
xml=$2
out=$(NIXL_LIBFABRIC_PROVIDER=tcp NIXL_LIBFABRIC_IFACE=lo NIXL_LIBFABRIC_TOPO_XML=$xml "$info" -t 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
    if printf '%s' "$out" | grep -q "could not be created"; then
        echo "SKIP: no tcp provider on lo here"
        exit 77
    fi
    echo "FAIL: nixl-info -t exited $rc"
    exit 1
fi
fail() { echo "FAIL: $1"; exit 1; }
printf '%s\n' "$out" | grep -q "^libfabric nixl-info-[0-9]*: provider tcp" || fail "no provider line"
printf '%s\n' "$out" | grep -q "^  rail 0  *domain lo " || fail "no rail line"
gpus=$(printf '%s\n' "$out" | grep -c "^  gpu ")
if printf '%s\n' "$out" | grep -q "without hwloc"; then
    [ "$gpus" -eq 0 ] || fail "GPUs listed without hwloc"
else
    [ "$gpus" -eq 8 ] || fail "$gpus GPU lines, expected 8"
    printf '%s\n' "$out" | grep -q "^  gpu 0000:a3:00.0  cuda [-0-9]*  *rails 0$" || fail "no line for GPU 0000:a3:00.0"
fi
"$info" -t -c >/dev/null 2>&1 && fail "-t -c accepted"
echo "ok"
