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
set -u
cd "$(dirname "$0")/../.."
B=${1:-build-gpu-run}
R=$B/gpu-results
rm -rf "$R"
mkdir -p "$R"
if command -v meson >/dev/null 2>&1; then MESON=meson; else MESON="python3 -m mesonbuild.mesonmain"; fi
status=0
say() { printf '%s\n' "$*" | tee -a "$R/summary.txt"; }

say "== machine"
nvidia-smi -L 2>&1 | tee -a "$R/summary.txt"
nvidia-smi topo -m >"$R/topo.txt" 2>&1 && head -5 "$R/topo.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

say "== build ($B)"
if [ ! -f "$B/build.ninja" ]; then
    $MESON setup "$B" --buildtype=debugoptimized >"$R/setup.log" 2>&1 || { tail -30 "$R/setup.log"; exit 1; }
fi
# Only what the GPU run needs: the rest of the tree is CI's.
$MESON compile -C "$B" nixl test_gpu test_cuda_ipc conformance >"$R/build.log" 2>&1 ||
    { grep -E 'error|FAILED' "$R/build.log" | head -30; exit 1; }
NB="$B/tools/nixlbench/nixlbench"
if ! $MESON compile -C "$B" nixlbench >>"$R/build.log" 2>&1; then
    # nixlbench's optional etcd mode may not build here (no cJSON): the GPU
    # rows need none of it, so build them without it.
    NB="$B/nixlbench-gpu"
    ${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -DNIXL_HAVE_CUDA_H=1 -I/usr/local/cuda/include -Iinclude \
        tools/nixlbench/nixlbench.c tools/nixlbench/bench_initiator.c tools/nixlbench/bench_target.c \
        tools/nixlbench/bench_limits.c tools/nixlbench/bench_pattern.c tools/nixlbench/bench_notif.c \
        tools/nixlbench/bench_vram.c tools/nixlbench/bench_kv.c tools/nixlbench/bench_etcd.c \
        -L"$B" -lnixl -ldl -Wl,-rpath,"$PWD/$B" -o "$NB" >>"$R/build.log" 2>&1 || { tail -20 "$R/build.log"; exit 1; }
    say "(nixlbench built without its etcd mode)"
fi
grep -E 'cuda_ipc:' "$R/setup.log" 2>/dev/null | head -2

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
# The staged fallback (NIXL_CUDA_IPC_MAP=0 forces it): its speed, for the record.
NIXL_CUDA_IPC_MAP=0 timeout 120 "$NB" --backend cuda_ipc --initiator-mem vram --initiator-dev $i_dev --target-mem vram \
    --target-dev $t_dev --block 256M --batch 1 --iters 5 --json "$R/bench-staged-256m.json" >"$R/bench-staged-256m.log" 2>&1
cat "$R/bench-staged-256m.log"
NIXL_CUDA_IPC_MAP=0 timeout 180 "$NB" --backend cuda_ipc --kv-replay --initiator-mem vram --initiator-dev $kv_i \
    --target-mem vram --target-dev $kv_t --iters 3 --warmup 1 --json "$R/bench-kv-staged.json" >"$R/bench-kv-staged.log" 2>&1
cat "$R/bench-kv-staged.log"

say "== summary"
python3 - "$R" "$ngpu" >"$R/table.txt" <<'PY' || status=1
import json, os, re, sys
r, ngpu = sys.argv[1], int(sys.argv[2])
def rows(name):
    try:
        return [json.loads(l) for l in open(os.path.join(r, name)) if l.strip()]
    except OSError:
        return []
bad = 0
print("%-44s %s" % ("test", "result"))
for line in open(os.path.join(r, "tests.log")):
    m = re.match(r"\s*\d+/\d+\s+\S+\s+/\s+(\S+)\s+(\S+)", line)
    if m:
        print("%-44s %s" % (m.group(1), m.group(2)))
        bad += m.group(2) not in ("OK", "SKIP")
try:
    last = open(os.path.join(r, "conformance-cross.log")).read().strip().splitlines()[-1]
    print("%-44s %s" % ("conformance cuda_ipc vram procs 2 (GPU 1->0)", last.replace("summary: ", "")))
except (OSError, IndexError):
    pass
try:
    last = open(os.path.join(r, "conformance-deadline-staged.log")).read().strip().splitlines()[-1]
    print("%-44s %s" % ("conformance deadline, staged", last.replace("summary: ", "")))
except (OSError, IndexError):
    pass
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
        bench-kv-ce.json bench-staged-256m.json bench-kv-staged.json bench-host-write.json bench-host-read.json; do
        [ -f "$R/$f" ] && cp "$R/$f" "$OUT/"
    done
fi
exit $status
