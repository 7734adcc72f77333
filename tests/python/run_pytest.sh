#!/bin/sh
# Runs the Python package's tests with Debian's python3 and its python3-pytest
# and python3-numpy, against the libnixl of the build directory it runs in.
# usage: run_pytest.sh SOURCE_ROOT [PRELOAD]   (PRELOAD: sanitizer runtimes, ':'-separated)
# Exits 77 (Meson's skip) with the reason when python3, pytest or numpy is missing.
set -eu
src=$1
preload=${2:-}
py=/usr/bin/python3
if ! [ -x "$py" ]; then
    echo "SKIP: $py not found (apt-get install python3)"
    exit 77
fi
for m in pytest numpy; do
    if ! "$py" -c "import $m" 2>/dev/null; then
        echo "SKIP: $py cannot import $m (apt-get install python3-$m)"
        exit 77
    fi
done
if [ -n "$preload" ]; then
    # A sanitizer build of libnixl needs its runtime loaded first; CPython
    # itself is not leak-clean, so leak checking stays off here.
    export LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
export PYTHONPATH="$src/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -rs -p no:cacheprovider "$src/tests/python"
