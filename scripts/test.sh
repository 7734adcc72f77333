#!/bin/sh
# test.sh - what CI runs: build with warnings as errors and run every test,
# then the same with AddressSanitizer and UndefinedBehaviorSanitizer (shm
# built as a loadable module there, so the module path is tested too), then
# a ThreadSanitizer build running the CPU tests (unit, threads, soak,
# conformance).  Exits non-zero when anything fails; every build runs either
# way.
set -eu
cd "$(dirname "$0")/.."

NIXL_SETUP_ARGS="-Dwerror=true" scripts/setup.sh

status=0
# Each stage's output is read again at the end (scripts/test-summary.py):
# one left from an earlier run must not stand in for a stage that did not run.
for b in build build-asan build-tsan; do
    rm -f "$b/meson-logs/testlog.json" "$b/meson-logs/console.txt"
done

# run_tests BUILDDIR ARGS...: meson test, its output shown and kept in
# BUILDDIR/meson-logs/console.txt; fails as meson test does.
run_tests() {
    b=$1
    shift
    mkdir -p "$b/meson-logs"
    rc_file="$b/meson-logs/console.rc"
    echo 1 >"$rc_file"
    { meson test -C "$b" "$@" 2>&1; echo $? >"$rc_file"; } | tee "$b/meson-logs/console.txt"
    [ "$(cat "$rc_file")" = 0 ]
}

echo "== tests: build/ (-Dwerror=true)"
run_tests build --print-errorlogs || status=1

echo "== sanitizer build: build-asan/ (address,undefined; shm as a module; -Dwerror=true)"
asan_args="-Db_sanitize=address,undefined -Dshm_backend=module -Dwerror=true"
if [ ! -f build-asan/build.ninja ]; then
    # shellcheck disable=SC2086
    meson setup build-asan $asan_args || status=1
else
    # shellcheck disable=SC2086
    meson configure build-asan $asan_args || status=1
fi
if [ -f build-asan/build.ninja ]; then
    if meson compile -C build-asan; then
        run_tests build-asan --print-errorlogs || status=1
    else
        status=1
    fi
fi

echo "== thread sanitizer build: build-tsan/ (thread; -Dwerror=true)"
# TSAN_OPTIONS (halt at the first report, tests/tsan.supp) come from the test
# env (tests/meson.build).  Left out here: GPU tests; the python package
# (CPython cannot dlopen a TSan-built libnixl: static TLS); the etcd and
# network-namespace tests (suites integration and netns: services and
# timing, not threads; netns also takes those in suite faults); the trust
# tests (they start threads in a child forked from a threaded process, which
# TSan refuses); libfabric, whose tests want a dead peer noticed within 2 s,
# which TSan's slowdown breaks, and take minutes each under it; the ucx
# battery (conformance-ucx-*), whose deadline case TSan's slowdown breaks
# the same way, and where UCX lands a peer's bytes on the progress thread
# ordered by shared memory TSan cannot see, its stack too old to restore
# for a suppression (the ucx unit tests do run).
tsan_args="-Db_sanitize=thread -Dwerror=true"
if [ ! -f build-tsan/build.ninja ]; then
    # shellcheck disable=SC2086
    meson setup build-tsan $tsan_args || status=1
else
    # shellcheck disable=SC2086
    meson configure build-tsan $tsan_args || status=1
fi
if [ -f build-tsan/build.ninja ]; then
    if meson compile -C build-tsan; then
        tsan_tests=$(meson test -C build-tsan --list --no-suite gpu --no-suite integration --no-suite libfabric \
            --no-suite netns --no-suite bench --no-suite trust 2>/dev/null | sed -n 's|^.* / ||p' | grep -v -e '^python$' -e '^conformance-libfabric-' -e '^conformance-ucx-')
        if [ -z "$tsan_tests" ]; then
            echo "test.sh: no tests listed in build-tsan" >&2
            status=1
        else
            # shellcheck disable=SC2086 # one word per test name
            run_tests build-tsan --print-errorlogs $tsan_tests || status=1
        fi
    else
        status=1
    fi
fi

# CI shows only the end of this output: name what failed in every stage here.
echo "== summary"
python3 scripts/test-summary.py build build-asan build-tsan || status=1

if [ "$status" -eq 0 ]; then
    echo "test.sh: all passed"
else
    echo "test.sh: FAILED (see the logs above)" >&2
fi
exit "$status"
