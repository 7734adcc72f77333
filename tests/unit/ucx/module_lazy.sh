#!/bin/sh
# module_lazy.sh MODULE - the ucx module loads nothing of UCX by itself: no
# DT_NEEDED entry names a UCX library and no UCX symbol is left undefined
# (ucx_ucp.c resolves them at the first create).  A header inline of UCX
# called by the backend would show up here as an undefined symbol.
set -u
m=$1
command -v readelf >/dev/null && command -v nm >/dev/null || { echo "SKIP: no readelf or nm (binutils)"; exit 77; }
[ -f "$m" ] || { echo "FAIL: no module $m"; exit 1; }
needed=$(readelf -d "$m" | grep NEEDED)
printf '%s\n' "$needed" | grep -Eq 'libuc[pstm]\.so' && { echo "FAIL: $m needs UCX:"; printf '%s\n' "$needed"; exit 1; }
undef=$(nm -D --undefined-only "$m" | grep -E ' (ucp|ucs|uct|ucm)_')
[ -z "$undef" ] || { echo "FAIL: $m leaves UCX symbols undefined:"; printf '%s\n' "$undef"; exit 1; }
echo "ok: $m needs $(printf '%s\n' "$needed" | sed -n 's/.*\[\(.*\)\]/\1/p' | tr '\n' ' ')and no UCX symbol"
