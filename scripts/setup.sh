#!/bin/sh
# setup.sh - make a fresh Debian 12 machine able to build nixl, then build it.
#
# Installs the Debian packages below (only the missing ones; through sudo
# when not root), configures build/ with Meson if it does not exist yet and
# compiles it.  Extra Meson options for build/ come from NIXL_SETUP_ARGS
# (scripts/test.sh passes -Dwerror=true); they are applied to an existing
# build/ too.
set -eu

# Everything the build, the tests and the sanitizer/fuzzer builds need.
PACKAGES="meson ninja-build pkg-config gcc clang libclang-rt-14-dev python3 libssl-dev liburing-dev
python3-pytest python3-numpy
libfabric-dev libfabric-bin libhwloc-dev libucx-dev ucx-utils
etcd-server etcd-client libcurl4-openssl-dev libcjson-dev openssl
iproute2 nftables
fio"

cd "$(dirname "$0")/.."

missing=""
for pkg in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing="$missing $pkg"
    fi
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "setup.sh: need root or sudo to install:$missing" >&2
        exit 1
    fi
    echo "setup.sh: installing:$missing"
    $SUDO apt-get update
    # shellcheck disable=SC2086 # one word per package
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
fi

setup_args="${NIXL_SETUP_ARGS:-}"
if [ ! -f build/build.ninja ]; then
    # shellcheck disable=SC2086 # options are separate words
    meson setup build $setup_args
elif [ -n "$setup_args" ]; then
    # shellcheck disable=SC2086
    meson configure build $setup_args
fi
meson compile -C build
