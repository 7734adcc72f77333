#!/bin/sh
# twohost.sh NETNS_PEER MODE [OPTION...] -- PEER_OPTION... - a cross-host
# backend between two "hosts": two network namespaces joined by a veth pair
# with private addresses.  PEER_OPTIONs name the backend and how to make it
# (netns_peer.c's header: --backend, --param, --env, --path), the same for
# both sides.  MODE:
#   transfer  KV-shaped WRITE with a notification, READ back, twice; the
#             target checks its buffer when each notification arrives, and
#             the initiator waits for that verdict before its next request
#   kill      requests in flight over a slowed link (on a connection
#             already in use), then the target is SIGKILLed: every request
#             must fail within --error-ms
#   linkdown  the same, but the link goes down instead; with --undo-after
#             it comes back that long after, and a request may instead
#             succeed after that, its bytes right
# Either fault: no failed WRITE notified; a new request afterwards fails
# within --error-ms (or, when every request got through, succeeds).
# OPTIONs:
#   --own-pidns       the target in a pid namespace of its own too (no
#                     pidfd on it: the backend's own liveness must tell)
#   --error-ms MS     a failed request's bound from the fault (2000)
#   --undo-after MS   linkdown: the link comes back after MS (default: never)
#   --wait-ms MS      nothing may still run MS after the fault (4000)
# Needs root (namespaces, veth, tc); exits 77 with the reason otherwise.
set -u
set -f
peer=$1
mode=$2
shift 2
own_pidns=0
error_ms=2000
undo_after=
wait_ms=4000
while [ $# -gt 0 ]; do
    case "$1" in
    --own-pidns) own_pidns=1 && shift ;;
    --error-ms) error_ms=$2 && shift 2 ;;
    --undo-after) undo_after=$2 && shift 2 ;;
    --wait-ms) wait_ms=$2 && shift 2 ;;
    --) shift && break ;;
    *) echo "twohost.sh: unknown option $1" && exit 2 ;;
    esac
done
peer_opts=$*
skip() {
    echo "SKIP: $*"
    exit 77
}
# The last line of a failed run says which check failed and why.
fail() {
    echo "twohost $mode: FAILED: $*"
    exit 1
}
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
tag=$$
nsA=nixlA$tag
nsB=nixlB$tag
vA=nxa$tag
vB=nxb$tag
net=10.213.$((tag % 250 + 1))
out=$(mktemp)
tpid=
cleanup() {
    [ -n "$tpid" ] && kill -9 "$tpid" 2>/dev/null
    ip netns del "$nsA" 2>/dev/null
    ip netns del "$nsB" 2>/dev/null
    rm -f "$out"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/netns_pair.sh"
netns_pair_up

size=8388608
if [ "$mode" != transfer ]; then
    # Slow enough that the requests are still in flight when the fault hits.
    size=4194304
    for side in "$nsA $vA" "$nsB $vB"; do
        set -- $side
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate 8mbit burst 32kb latency 2s 2>/dev/null ||
            skip "cannot shape the link (tc tbf)"
    done
fi

netns_target_start "$size"
echo "target in $nsB at $net.2:$tport (pid $thpid$([ $own_pidns = 1 ] && echo ', its own pid namespace')), initiator in $nsA"

# initiator ARG...: netns_peer's initiator in $nsA against the target,
# seeing the target's output; sets $rc.
initiator() {
    # shellcheck disable=SC2086 # $peer_opts: one word each
    NETNS_PEER_BUF=$tbuf NETNS_PEER_LOG=$out ip netns exec "$nsA" "$peer" initiator --iface "$vA" \
        --peer "$net.2:$tport" --size "$size" "$@" $peer_opts
    rc=$?
}

case "$mode" in
transfer)
    initiator
    wait "$tpid"
    tpid=
    cat "$out"
    [ $rc = 0 ] || fail "the initiator exited with status $rc (its netns_peer: FAILED line above)"
    grep -q '^verified 11 (from netns-initiator)' "$out" && grep -q '^verified 12 (from netns-initiator)' "$out" ||
        fail "the target did not report 'verified' for both WRITEs (every byte there at the notification)"
    ;;
kill)
    initiator --requests 4 --fault "kill -9 $thpid" --error-ms "$error_ms" --wait-ms "$wait_ms"
    [ $rc = 0 ] || { cat "$out"; fail "the initiator exited with status $rc (its FAILED line above the target's output)"; }
    ;;
linkdown)
    if [ -n "$undo_after" ]; then
        initiator --requests 4 --fault "ip link set $vA down" --undo "ip link set $vA up" --undo-after "$undo_after" \
            --error-ms "$error_ms" --wait-ms "$wait_ms"
    else
        initiator --requests 4 --fault "ip link set $vA down" --error-ms "$error_ms" --wait-ms "$wait_ms"
    fi
    [ $rc = 0 ] || { cat "$out"; fail "the initiator exited with status $rc (its FAILED line above the target's output)"; }
    # The target, alive behind the link, prints a verdict for every
    # notification it gets: the initiator checked none was of a failed WRITE.
    echo "target: $(grep -c '^verified ' "$out") WRITE(s) verified at their notification, $(grep -c '^corrupt ' "$out") corrupt"
    ;;
*)
    echo "unknown mode $mode"
    exit 2
    ;;
esac
exit 0
