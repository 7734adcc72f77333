#!/bin/sh
# nixlbench --storage rows, small, with their fio column (tools/nixlbench/README.md).
# usage: nixlbench_storage.sh NIXLBENCH fio|degrades
#   fio       the real fio (skips, said, when it is not installed): --need-fio passes,
#             the row and its JSON carry fio's rate and the ratio beside it
#   degrades  stand-ins: a program that is not there, one that prints garbage, one that
#             fails; each row says so in the fio column and the run still succeeds,
#             and --need-fio turns each into exit status 1
# Exits 77 (a skip, with the reason) where the kernel refuses io_uring: the raw limit needs it.
set -u
bench=$1 mode=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small="--storage --block 4K --batch 64 --depth 16 --iters 2 --pairs 2 --fio-ms 100 --dir ${TMPDIR:-/var/tmp}"

fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME ARGS...: stdout, stderr and JSON of one row in $tmp/NAME.*, its status in $rc
run() {
    name=$1
    shift
    # shellcheck disable=SC2086 # $small is words
    "$bench" $small --json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    rc=$?
    if grep -q "needs io_uring" "$tmp/$name.err"; then
        echo "skip: $(cat "$tmp/$name.err")"
        exit 77
    fi
    cat "$tmp/$name.out" "$tmp/$name.err"
}

case $mode in
fio)
    if ! command -v fio >/dev/null 2>&1; then
        echo "skip: fio is not installed (Debian package fio; scripts/setup.sh installs it)"
        exit 77
    fi
    for op in write read; do
        run "fio-$op" --op "$op" --need-fio
        [ "$rc" -eq 0 ] || fail "--op $op --need-fio: exit status $rc"
        grep -q '"fio":"ok"' "$tmp/fio-$op.json" || fail "--op $op: JSON row without \"fio\":\"ok\""
        grep -Eq '"fio_gbps":[0-9.]+,"ratio_fio":[0-9.]+' "$tmp/fio-$op.json" ||
            fail "--op $op: JSON row without fio_gbps and ratio_fio"
        grep -v '^#' "$tmp/fio-$op.out" | grep -q 'fio:' && fail "--op $op: the row names a fio failure"
    done
    ;;
degrades)
    printf '#!/bin/sh\necho "this is not JSON {{{"\n' >"$tmp/garbage"
    printf '#!/bin/sh\necho "fio: failed to open file" >&2\nexit 1\n' >"$tmp/failing"
    chmod +x "$tmp/garbage" "$tmp/failing"
    for case in "$tmp/garbage:unreadable" "$tmp/failing:failed" "$tmp/not-there:not installed"; do
        prog=${case%%:*} word=${case#*:}
        run stand-in --fio "$prog"
        [ "$rc" -eq 0 ] || fail "--fio $prog: exit status $rc (the row should degrade, not fail)"
        grep -q "posix.uring\|posix.sync" "$tmp/stand-in.out" || fail "--fio $prog: no row"
        grep -v '^#' "$tmp/stand-in.out" | grep -q "fio: $word" || fail "--fio $prog: the row does not say \"fio: $word\""
        grep -q "\"fio\":\"$word\"" "$tmp/stand-in.json" || fail "--fio $prog: JSON without \"fio\":\"$word\""
        grep -q '"ratio_fio"' "$tmp/stand-in.json" && fail "--fio $prog: JSON has a ratio against no fio"
        run need --fio "$prog" --need-fio
        [ "$rc" -eq 1 ] || fail "--fio $prog --need-fio: exit status $rc, expected 1"
        grep -q -- "--need-fio: fio $word" "$tmp/need.err" || fail "--fio $prog --need-fio: no message"
    done
    run no-fio --no-fio
    [ "$rc" -eq 0 ] || fail "--no-fio: exit status $rc"
    grep -q '"fio":"not run"' "$tmp/no-fio.json" || fail "--no-fio: JSON without \"fio\":\"not run\""
    ;;
*)
    fail "unknown mode $mode"
    ;;
esac
echo "ok: nixlbench --storage $mode"
