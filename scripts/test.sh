#!/bin/sh
# test.sh - what CI runs: build with warnings as errors and run every test,
# then the same with AddressSanitizer and UndefinedBehaviorSanitizer (shm
# built as a loadable module there, so the module path is tested too).
# Exits non-zero when anything fails; both builds run either way.
set -eu
cd "$(dirname "$0")/.."

NIXL_SETUP_ARGS="-Dwerror=true" scripts/setup.sh

status=0

echo "== tests: build/ (-Dwerror=true)"
meson test -C build --print-errorlogs || status=1

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
        meson test -C build-asan --print-errorlogs || status=1
    else
        status=1
    fi
fi

if [ "$status" -eq 0 ]; then
    echo "test.sh: all passed"
else
    echo "test.sh: FAILED (see the logs above)" >&2
fi
exit "$status"
