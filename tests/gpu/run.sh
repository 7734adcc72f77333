#!/bin/sh
# tests/gpu/run.sh - on a GPU machine: build, run the GPU suite (tests/gpu,
# the cuda_ipc unit tests, the conformance battery with VRAM on both sides)
# and the GPU benchmarks, then print a short table.
#
#   tests/gpu/run.sh [BUILD_DIR]        (default build-gpu-run)
#
# Needs meson and ninja (on PATH or as python3 -m mesonbuild.mesonmain), a C
# compiler, CUDA's headers (-Dgpu_include_dir, default /usr/local/cuda/include)
# and nvcc for the kernel.  Logs and JSON go to BUILD_DIR/gpu-results; the
# main ones are also copied to $OUT when it is set.  Exit status: 0 when
# every test passed or skipped and both benchmark goals were met, 1 otherwise.
# GPU_RUN_ONLY="ucx libfabric" runs only those sections (tests, bench,
# libfabric, ucx: host memory, ucxgpu: GPU memory through a UCX with CUDA),
# to spend little device time on one question; unset: all.
set -u
cd "$(dirname "$0")/../.."
B=${1:-build-gpu-run}
R=$B/gpu-results
rm -rf "$R"
mkdir -p "$R"
if command -v meson >/dev/null 2>&1; then MESON=meson; else MESON="python3 -m mesonbuild.mesonmain"; fi
status=0
say() { printf '%s\n' "$*" | tee -a "$R/summary.txt"; }
wanted() {
    [ -z "${GPU_RUN_ONLY:-}" ] && return 0
    case " $GPU_RUN_ONLY " in *" $1 "*) return 0 ;; esac
    return 1
}
want() {
    wanted "$1" && return 0
    say "== $1: left out (GPU_RUN_ONLY=$GPU_RUN_ONLY)"
    return 1
}

say "== machine"
nvidia-smi -L 2>&1 | tee -a "$R/summary.txt"
nvidia-smi topo -m >"$R/topo.txt" 2>&1 && head -5 "$R/topo.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

say "== build ($B)"
if [ ! -f "$B/build.ninja" ]; then
    $MESON setup "$B" --buildtype=debugoptimized >"$R/setup.log" 2>&1 || { tail -30 "$R/setup.log"; exit 1; }
fi
# Only what the GPU run needs: the rest of the tree is CI's.
$MESON compile -C "$B" nixl test_gpu test_posix_vram test_gds_vram test_cuda_ipc conformance >"$R/build.log" 2>&1 ||
    { grep -E 'error|FAILED' "$R/build.log" | head -30; exit 1; }
# Our cuFile declarations against <cufile.h>: a target only where the header is.
if grep -q cufile_layout "$B/build.ninja"; then
    $MESON compile -C "$B" cufile_layout >>"$R/build.log" 2>&1 || { say "cufile_layout does not build:"; grep -E 'error' "$R/build.log" | head; status=1; }
fi
NB="$B/tools/nixlbench/nixlbench"
if ! $MESON compile -C "$B" nixlbench >>"$R/build.log" 2>&1; then
    # nixlbench's optional etcd mode may not build here (no cJSON): the GPU
    # rows need none of it, so build them without it.
    NB="$B/nixlbench-gpu"
    ${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -DNIXL_HAVE_CUDA_H=1 -I/usr/local/cuda/include -Iinclude \
        tools/nixlbench/nixlbench.c tools/nixlbench/bench_initiator.c tools/nixlbench/bench_target.c \
        tools/nixlbench/bench_limits.c tools/nixlbench/bench_pattern.c tools/nixlbench/bench_notif.c \
        tools/nixlbench/bench_vram.c tools/nixlbench/bench_kv.c tools/nixlbench/bench_etcd.c \
        tools/nixlbench/bench_reg.c tools/nixlbench/bench_storage.c tools/nixlbench/bench_fio.c \
        tools/nixlbench/bench_ucx.c -L"$B" -lnixl -ldl -lm -lpthread -Wl,-rpath,"$PWD/$B" -o "$NB" >>"$R/build.log" 2>&1 || { tail -20 "$R/build.log"; exit 1; }
    say "(nixlbench built without its etcd mode)"
fi
grep -E 'cuda_ipc:' "$R/setup.log" 2>/dev/null | head -2

if want tests; then
say "== tests (suites gpu, cuda_ipc)"
timeout 420 $MESON test -C "$B" --no-rebuild --suite gpu --suite cuda_ipc --print-errorlogs --num-processes 1 \
    >"$R/tests.log" 2>&1 || status=1
grep -E '^ *[0-9]+/[0-9]+ ' "$R/tests.log" | tee -a "$R/summary.txt"
cp "$B/meson-logs/testlog.txt" "$R/testlog.txt" 2>/dev/null

if [ "$ngpu" -ge 2 ]; then
    say "== conformance, VRAM, target in another process, initiator GPU 1 -> target GPU 0"
    timeout 400 "$B/tests/conformance/conformance" --backend cuda_ipc --procs 2 --mem vram --devs 1,0 \
        >"$R/conformance-cross.log" 2>&1 || status=1
    tail -1 "$R/conformance-cross.log" | tee -a "$R/summary.txt"
    grep -E '^FAIL' "$R/conformance-cross.log" | head -10
fi
# Deadlines on the staged path (slow enough to pass a 1 ms deadline): the
# staging worker's cancel, no notification, no late writes.
say "== conformance deadline, VRAM, staged fallback (NIXL_CUDA_IPC_MAP=0)"
NIXL_CUDA_IPC_MAP=0 timeout 120 "$B/tests/conformance/conformance" --backend cuda_ipc --procs 2 --mem vram \
    --devs 0,$([ "$ngpu" -ge 2 ] && echo 1 || echo 0) --filter deadline >"$R/conformance-deadline-staged.log" 2>&1 || status=1
grep -E 'deadline|^summary' "$R/conformance-deadline-staged.log" | tee -a "$R/summary.txt"
fi

if want bench; then
say "== benchmarks"
i_dev=0; t_dev=0
[ "$ngpu" -ge 2 ] && t_dev=1
timeout 120 "$NB" --backend cuda_ipc --initiator-mem vram --initiator-dev $i_dev --target-mem vram \
    --target-dev $t_dev --block 256M --batch 1 --iters 50 --json "$R/bench-256m.json" >"$R/bench-256m.log" 2>&1 || status=1
cat "$R/bench-256m.log"
timeout 120 "$NB" --backend cuda_ipc --initiator-mem vram --initiator-dev $i_dev --target-mem vram \
    --target-dev $t_dev --block 1K:64K --batch 4096 --iters 50 --json "$R/bench-small.json" >"$R/bench-small.log" 2>&1 || status=1
cat "$R/bench-small.log"
kv_i=0; kv_t=0
[ "$ngpu" -ge 2 ] && kv_i=1
timeout 240 "$NB" --backend cuda_ipc --kv-e2e --initiator-mem vram --initiator-dev $kv_i --target-mem vram \
    --target-dev $kv_t --iters 20 --json "$R/bench-kv.json" >"$R/bench-kv.log" 2>&1 || status=1
cat "$R/bench-kv.log"
NIXL_CUDA_IPC_KERNEL=0 timeout 180 "$NB" --backend cuda_ipc --kv-replay --initiator-mem vram --initiator-dev $kv_i \
    --target-mem vram --target-dev $kv_t --iters 3 --warmup 1 --json "$R/bench-kv-ce.json" >"$R/bench-kv-ce.log" 2>&1
cat "$R/bench-kv-ce.log"
# Local host memory <-> the target's VRAM (cuda_ipc's copy engines), against
# the driver's own host copy of the same bytes.
for op in write read; do
    timeout 120 "$NB" --backend cuda_ipc --op $op --initiator-mem dram --target-mem vram --target-dev $t_dev \
        --alloc malloc --block 64M --batch 1 --iters 20 --json "$R/bench-host-$op.json" >"$R/bench-host-$op.log" 2>&1 ||
        status=1
    cat "$R/bench-host-$op.log"
done
# GPU memory to a file and back through gds, against a raw cuFile loop in the
# same run (page cache, then O_DIRECT); the path says direct or compat.
for d in "" --direct; do
    timeout 240 "$NB" --gds --size 256M --pairs 3 $d >"$R/bench-gds$d.log" 2>&1 || status=1
    cat "$R/bench-gds$d.log"
done
# The staged fallback (NIXL_CUDA_IPC_MAP=0 forces it): its speed, for the record.
NIXL_CUDA_IPC_MAP=0 timeout 120 "$NB" --backend cuda_ipc --initiator-mem vram --initiator-dev $i_dev --target-mem vram \
    --target-dev $t_dev --block 256M --batch 1 --iters 5 --json "$R/bench-staged-256m.json" >"$R/bench-staged-256m.log" 2>&1
cat "$R/bench-staged-256m.log"
NIXL_CUDA_IPC_MAP=0 timeout 180 "$NB" --backend cuda_ipc --kv-replay --initiator-mem vram --initiator-dev $kv_i \
    --target-mem vram --target-dev $kv_t --iters 3 --warmup 1 --json "$R/bench-kv-staged.json" >"$R/bench-kv-staged.log" 2>&1
cat "$R/bench-kv-staged.log"
fi

# libfabric's shm provider with GPU memory: only when nixl was built with
# the libfabric backend and the libfabric it loads (NIXL_LIBFABRIC_LIB, or
# the system's libfabric.so.1) has CUDA support; Debian's and Ubuntu's have
# none.  A probe row says which.
$MESON compile -C "$B" nixl-info >>"$R/build.log" 2>&1
if want libfabric; then
say "== libfabric shm, VRAM (${NIXL_LIBFABRIC_LIB:-libfabric.so.1})"
lf_row() { # NAME ARGS...: one nixlbench run over provider=shm, rc kept in NAME.rc
    n=$1
    shift
    NIXL_LIBFABRIC_PROVIDER=shm NIXL_LIBFABRIC_INTRANODE=provider timeout 180 "$NB" --backend libfabric "$@" \
        --json "$R/$n.json" >"$R/$n.log" 2>&1
    echo $? >"$R/$n.rc"
}
if ! "$B/tools/nixl-info" 2>/dev/null | grep -q '^backend libfabric'; then
    say "SKIP libfabric rows: this build has no libfabric backend (no libfabric headers; PKG_CONFIG_PATH)"
else
    lf_row lf-probe --initiator-mem vram --target-mem vram --block 4M --batch 1 --iters 5
    if grep -q -E 'cannot register CUDA memory|no CUDA HMEM support' "$R/lf-probe.log"; then
        say "SKIP libfabric rows: this libfabric has no CUDA support (FI_HMEM_CUDA); set NIXL_LIBFABRIC_LIB to one built with it"
        rm -f "$R/lf-probe.json"
    else
        [ "$(cat "$R/lf-probe.rc")" = 0 ] || status=1
        lf_row lf-256m --initiator-mem vram --target-mem vram --block 256M --batch 1 --iters 10 --warmup 2
        lf_row lf-256m-read --op read --initiator-mem vram --target-mem vram --block 256M --batch 1 --iters 10 --warmup 2
        lf_row lf-dram-vram --initiator-mem dram --target-mem vram --block 64M --batch 1 --iters 10
        lf_row lf-vram-dram --initiator-mem vram --target-mem dram --block 64M --batch 1 --iters 10
        lf_row lf-kv --kv-replay --initiator-mem vram --target-mem vram --iters 3 --warmup 1
        for n in lf-256m lf-256m-read lf-dram-vram lf-vram-dram lf-kv; do
            [ "$(cat "$R/$n.rc")" = 0 ] || { status=1; say "$n failed:"; tail -3 "$R/$n.log" | tee -a "$R/summary.txt"; }
        done
        for p in 1 2; do
            NIXL_LIBFABRIC_PROVIDER=shm timeout 200 "$B/tests/conformance/conformance" --backend libfabric --procs $p \
                --mem vram >"$R/conformance-lf-$p.log" 2>&1 || status=1
            tail -1 "$R/conformance-lf-$p.log" | tee -a "$R/summary.txt"
            grep -E '^FAIL' "$R/conformance-lf-$p.log" | head -10
        done
        # The path must be true: by CUDA IPC unless this libfabric said its
        # shm completes IPC copies early (then staged, a counted fallback).
        if grep -q 'completes a CUDA IPC copy before' "$R/lf-probe.log"; then lf_want=sar; else lf_want=ipc; fi
        echo "$lf_want" >"$R/lf-want.txt"
    fi
fi
fi

# ucx with host memory over this machine's own UCX (issue 17: what it offers,
# the DRAM rows there).  Its module comes from this build when UCX's headers
# are here, else from GPU_UCX_MODULE_DIR: a libnixl_backend_ucx.so built of
# this same tree elsewhere (the lent GPU machine has UCX's libraries only).
if wanted ucx || wanted ucxgpu; then
say "== ucx (${NIXL_UCX_LIB:-this machine's UCX})"
ucx_dir=""
if [ -f "$B/src/backends/libnixl_backend_ucx.so" ]; then
    ucx_dir=$PWD/$B/src/backends
elif [ -n "${GPU_UCX_MODULE_DIR:-}" ] && [ -f "$GPU_UCX_MODULE_DIR/libnixl_backend_ucx.so" ]; then
    ucx_dir=$(cd "$GPU_UCX_MODULE_DIR" && pwd)
fi
if [ -z "$ucx_dir" ]; then
    say "SKIP ucx rows: no ucx module (no UCX headers here; set GPU_UCX_MODULE_DIR to one built elsewhere)"
else
    NIXL_PLUGIN_DIR=$ucx_dir "$B/tools/nixl-info" -d ucx >"$R/ucx-info.txt" 2>&1
    while IFS= read -r l; do say "ucx: $l"; done <"$R/ucx-info.txt"
    if want ucx; then
    say "== ucx, host memory"
    for tls in tcp sm; do
        for p in 1 2; do
            NIXL_PLUGIN_DIR=$ucx_dir UCX_TLS=$tls timeout 200 "$B/tests/conformance/conformance" --backend ucx \
                --procs $p >"$R/conformance-ucx-$tls-$p.log" 2>&1 || status=1
            say "conformance ucx $tls procs $p: $(tail -1 "$R/conformance-ucx-$tls-$p.log")"
            grep -E '^FAIL' "$R/conformance-ucx-$tls-$p.log" | head -10
        done
        for op in write read; do
            for blk in 1M 64M; do
                NIXL_PLUGIN_DIR=$ucx_dir UCX_TLS=$tls timeout 120 "$NB" --backend ucx --op $op --alloc malloc \
                    --block $blk --batch 1 --iters 50 --json "$R/ucx-$tls-$op-$blk.json" \
                    >"$R/ucx-$tls-$op-$blk.log" 2>&1 || { status=1; tail -3 "$R/ucx-$tls-$op-$blk.log"; }
            done
        done
    done
    grep -h '^# limit' "$R"/ucx-*-write-1M.log | sort -u | tee -a "$R/summary.txt"
    fi
    # GPU memory: only through a UCX built with CUDA (NIXL_UCX_LIB, with its
    # lib dir on LD_LIBRARY_PATH); Debian's and Ubuntu's have none, and a
    # request then is NO_PATH (the unit test vram says so on every box).
    if ! want ucxgpu; then
        :
    elif ! grep -q 'CUDA memory: yes' "$R/ucx-info.txt"; then
        say "SKIP ucx GPU rows: this UCX has no CUDA support; set NIXL_UCX_LIB to a libucp built with it"
    else
        say "== ucx, GPU memory"
        # UCX's choice inside a node (cuda_ipc), then the path between hosts
        # without GPUDirect: tcp, UCX staging through cuda_copy.
        for tls in all tcp,cuda_copy; do
            for p in 1 2; do
                n=conformance-ucx-vram-${tls%%,*}-$p
                NIXL_PLUGIN_DIR=$ucx_dir UCX_TLS=$tls timeout 200 "$B/tests/conformance/conformance" --backend ucx \
                    --procs $p --mem vram >"$R/$n.log" 2>&1 || status=1
                say "conformance ucx vram UCX_TLS=$tls procs $p: $(tail -1 "$R/$n.log")"
                grep -E '^FAIL' "$R/$n.log" | head -10
            done
        done
        uv_row() { # NAME UCX_TLS ARGS...
            n=$1 t=$2
            shift 2
            NIXL_PLUGIN_DIR=$ucx_dir UCX_TLS=$t timeout 150 "$NB" --backend ucx "$@" --json "$R/$n.json" \
                >"$R/$n.log" 2>&1 || { status=1; say "$n failed:"; tail -3 "$R/$n.log" | tee -a "$R/summary.txt"; }
        }
        uv_row ucxv-256m all --initiator-mem vram --target-mem vram --block 256M --batch 1 --iters 20
        uv_row ucxv-small all --initiator-mem vram --target-mem vram --block 64K --batch 1024 --iters 20
        uv_row ucxv-read all --op read --initiator-mem vram --target-mem vram --block 64M --batch 1 --iters 20
        uv_row ucxv-dram-vram all --initiator-mem dram --target-mem vram --alloc malloc --block 64M --batch 1 --iters 20
        uv_row ucxv-vram-dram all --initiator-mem vram --target-mem dram --alloc malloc --block 64M --batch 1 --iters 20
        uv_row ucxv-tcp tcp,cuda_copy --initiator-mem vram --target-mem vram --block 64M --batch 1 --iters 10
        uv_row ucxv-kv all --kv-e2e --initiator-mem vram --target-mem vram --iters 10
    fi
fi
fi

say "== summary"
python3 - "$R" "$ngpu" >"$R/table.txt" <<'PY' || status=1
import json, os, re, sys
r, ngpu = sys.argv[1], int(sys.argv[2])
def rows(name):
    try:
        return [json.loads(l) for l in open(os.path.join(r, name)) if l.strip()]
    except OSError:
        return []
def conformance_line(label, name):
    # a conformance log's summary, its last line; nothing when it did not run
    try:
        last = open(os.path.join(r, name)).read().strip().splitlines()[-1]
    except (OSError, IndexError):
        return
    print("%-44s %s" % (label, last.replace("summary: ", "")))
bad = 0
print("%-44s %s" % ("test", "result"))
ran_tests = os.path.exists(os.path.join(r, "tests.log"))  # GPU_RUN_ONLY may leave the tests out
for line in open(os.path.join(r, "tests.log")) if ran_tests else []:
    m = re.match(r"\s*\d+/\d+\s+\S+\s+[-/]\s+(\S+)\s+(\S+)", line)  # meson writes " / " or " - "
    if m:
        print("%-44s %s" % (m.group(1), m.group(2)))
        bad += m.group(2) not in ("OK", "SKIP")
conformance_line("conformance cuda_ipc vram procs 2 (GPU 1->0)", "conformance-cross.log")
# Indexed requests over cuda_ipc with VRAM on both sides take the indexed
# kernel (the conformance case notes each request's path).
try:
    ix = re.findall(r"^\s+indexed: path ([^\s,]+)", open(os.path.join(r, "testlog.txt")).read(), re.M)
except OSError:
    ix = []
ix_ok = bool(ix) and all(p == "cuda_ipc.kernel.indexed" for p in ix)
if ran_tests:
    bad += not ix_ok
    print("%-44s %s" % ("indexed requests' path (conformance)", ", ".join(sorted(set(ix))) or "none seen") +
          ("" if ix_ok else "  (WRONG: want cuda_ipc.kernel.indexed)"))
conformance_line("conformance deadline, staged", "conformance-deadline-staged.log")
print()
print("%-36s %10s %10s %7s  %s" % ("benchmark", "GB/s", "limit", "ratio", "path"))
for x in rows("bench-256m.json") + rows("bench-small.json") + rows("bench-staged-256m.json"):
    print("%-36s %10.1f %10.1f %7.3f  %s" % ("write %d x %d B GPU%s" % (x["batch_size"], x["block_size"],
          "0->1" if ngpu > 1 else "0->0"), x["gbps"], x["limit_gbps"], x["ratio"], x["path"]))
for op in ("write", "read"):
    for x in rows("bench-host-%s.json" % op):
        print("%-36s %10.1f %10.1f %7.3f  %s" % ("%s %d x %d B host<->GPU" % (op, x["batch_size"], x["block_size"]),
              x["gbps"], x["limit_gbps"], x["ratio"], x["path"]))
big = rows("bench-256m.json")
if big:
    ok = big[0]["ratio"] >= 0.97
    bad += not ok
    print("goal 256M ratio >= 0.97: %s (%.3f)" % ("met" if ok else "MISSED", big[0]["ratio"]))
for name, label in (("bench-kv.json", "KV replay"), ("bench-kv-ce.json", "KV replay, kernel off"),
                    ("bench-kv-staged.json", "KV replay, staged fallback")):
    for k in rows(name):
        print("%-36s %8.3f ms/request (best %.3f), %d descs, floor %.3f ms, path %s" % (
            label, k["ms_per_request"], k["best_ms"], k["descs_after_merge"], k["floor_ms"], k["path"]))
for k in rows("bench-kv.json"):
    for e in ("sglang", "vllm", "indexed"):
        if e + "_lib_ms" in k:
            print("%-36s %8.3f ms/request: make %.3f, post %.3f, wait %.3f, release %.3f (floor %.3f ms)" % (
                "whole request, " + e, k[e + "_lib_ms"], k[e + "_make_ms"], k[e + "_post_ms"], k[e + "_wait_ms"],
                k[e + "_release_ms"], k["floor_ms"]))
# libfabric over shm (when run): each row's path against what it must be.
lf_rows = [(n, x) for n in ("lf-256m", "lf-256m-read", "lf-dram-vram", "lf-vram-dram") for x in rows(n + ".json")]
lf_kv = rows("lf-kv.json")
if lf_rows or lf_kv:
    want = open(os.path.join(r, "lf-want.txt")).read().strip()
    for p in (1, 2):
        conformance_line("conformance libfabric shm vram procs %d" % p, "conformance-lf-%d.log" % p)
    for n, x in lf_rows:
        # Our GPU memory goes by IPC (or staged); host memory of ours always
        # through shm's bounce buffers (FI_HMEM turns its CMA off).
        exp = "libfabric.shm.%s.%s" % (want if x["initiator_mem"] == "vram" else "sar", x["op"])
        true = x["path"] == exp
        bad += not true
        print("%-36s %10.1f %10.1f %7.3f  %s%s" % ("libfabric %s %d B %s->%s" % (x["op"], x["block_size"],
              x["initiator_mem"], x["target_mem"]), x["gbps"], x["limit_gbps"], x["ratio"], x["path"],
              "" if true else "  (WRONG: want %s)" % exp))
    for k in lf_kv:
        print("%-36s %8.3f ms/request (best %.3f), post %.0f us, path %s" % (
            "KV replay, libfabric shm", k["ms_per_request"], k["best_ms"], k["post_us"], k["path"]))
    big = [x for n, x in lf_rows if n == "lf-256m"]
    if big:
        print("goal (issue 19) libfabric 256M ratio >= 0.5: %s (%.3f)" % ("met" if big[0]["ratio"] >= 0.5 else
              "missed", big[0]["ratio"]))
    if lf_kv:
        print("goal (issue 19) libfabric KV replay < 533 ms: %s (%.1f ms)" % (
            "met" if lf_kv[0]["ms_per_request"] < 533 else "missed", lf_kv[0]["ms_per_request"]))
for tls in ("tcp", "sm"):
    for p in (1, 2):
        conformance_line("conformance ucx %s dram procs %d" % (tls, p), "conformance-ucx-%s-%d.log" % (tls, p))
    for op in ("write", "read"):
        for blk in ("1M", "64M"):
            for x in rows("ucx-%s-%s-%s.json" % (tls, op, blk)):
                print("%-36s %10.2f %10.2f %7.3f  %s" % ("ucx %s %s %d B dram" % (tls, op, x["block_size"]),
                      x["gbps"], x["limit_gbps"], x["ratio"], x["path"]))
for tls in ("all", "tcp"):
    for p in (1, 2):
        conformance_line("conformance ucx %s vram procs %d" % (tls, p), "conformance-ucx-vram-%s-%d.log" % (tls, p))
# ucx with GPU memory (a UCX with CUDA): inside a node by cuda_ipc, over tcp
# staged by UCX; each row's path must say so.  A READ, and a WRITE with host
# memory on a side, UCX may emulate over shared memory (no NVLink: cuda_ipc's
# get is off; cuda_ipc maps GPU memory only): then the path names it (a
# fallback, src/backends/ucx/README.md, VRAM).
for n in ("ucxv-256m", "ucxv-small", "ucxv-read", "ucxv-dram-vram", "ucxv-vram-dram", "ucxv-tcp"):
    for x in rows(n + ".json"):
        exp = ["ucx.tcp"] if n == "ucxv-tcp" else ["ucx.cuda_ipc"]
        if n in ("ucxv-read", "ucxv-dram-vram", "ucxv-vram-dram"):
            exp += ["ucx.sysv", "ucx.posix"]
        true = x["path"] in exp
        bad += not true
        print("%-36s %10.2f %10.2f %7.3f  %s%s" % ("ucx %s %d x %d B %s->%s" % (x["op"], x["batch_size"],
              x["block_size"], x["initiator_mem"], x["target_mem"]), x["gbps"], x["limit_gbps"], x["ratio"],
              x["path"], "" if x["path"] == exp[0] else "  (UCX emulates it)" if true else
              "  (WRONG: want %s)" % " or ".join(exp)))
for k in rows("ucxv-kv.json"):
    print("%-36s %8.3f ms/request (best %.3f), %d descs, floor %.3f ms, path %s" % (
        "KV replay, ucx", k["ms_per_request"], k["best_ms"], k["descs_after_merge"], k["floor_ms"], k["path"]))
for k in rows("bench-kv.json"):
    if "indexed_lib_ms" in k:
        print("goal (issue 13) indexed request <= 0.5 ms (C, --kv-e2e): %s (%.3f ms)" % (
            "met" if k["indexed_lib_ms"] <= 0.5 else "missed", k["indexed_lib_ms"]))
kv = rows("bench-kv.json")
if kv:
    ok = kv[0]["ms_per_request"] <= 5.0
    bad += not ok
    print("goal KV replay <= 5 ms per request: %s (%.3f ms)" % ("met" if ok else "MISSED", kv[0]["ms_per_request"]))
sys.exit(1 if bad else 0)
PY
tee -a "$R/summary.txt" <"$R/table.txt"
if [ -n "${OUT:-}" ]; then
    for f in summary.txt testlog.txt conformance-cross.log bench-256m.json bench-small.json bench-kv.json \
        bench-kv-ce.json bench-staged-256m.json bench-kv-staged.json bench-host-write.json bench-host-read.json \
        lf-256m.json lf-kv.json ucx-info.txt conformance-ucx-tcp-1.log conformance-ucx-tcp-2.log \
        conformance-ucx-sm-1.log conformance-ucx-sm-2.log; do
        [ -f "$R/$f" ] && cp "$R/$f" "$OUT/"
    done
    for f in "$R"/ucx-*.json "$R"/ucxv-*.json "$R"/ucxv-*.log "$R"/conformance-ucx-vram-*.log; do
        [ -f "$f" ] && cp "$f" "$OUT/"
    done
fi
exit $status
