#!/bin/sh
# twohost.sh LF_PEER MODE - the libfabric backend between two "hosts": two
# network namespaces joined by a veth pair with private addresses, tcp
# between them.  MODE:
#   transfer  KV-shaped WRITE with a notification, READ back, twice; the
#             target checks its buffer when each notification arrives, and
#             the initiator waits for that verdict before its next request
#   kill      requests in flight over a slowed link, then the target is
#             SIGKILLed: every request must fail within 2 s
#   linkdown  the same, but the link goes down instead
# Needs root (namespaces, veth, tc); exits 77 with the reason otherwise.
set -u
peer=$1
mode=$2
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
set -- $(grep '^ready ' "$out")
port=$2
pid=$3
buf=$4
echo "target in $nsB at $net.2:$port (pid $pid), initiator in $nsA"

case "$mode" in
transfer)
    LF_PEER_BUF=$buf LF_PEER_LOG=$out ip netns exec "$nsA" "$peer" initiator --iface "$vA" --peer "$net.2:$port" \
        --size "$size"
    rc=$?
    wait "$tpid"
    tpid=
    cat "$out"
    [ $rc = 0 ] || fail "the initiator exited with status $rc (its lf_peer: FAILED line above)"
    grep -q '^verified 11 (from lf-initiator)' "$out" && grep -q '^verified 12 (from lf-initiator)' "$out" ||
        fail "the target did not report 'verified' for both WRITEs (every byte there at the notification)"
    ;;
kill)
    LF_PEER_BUF=$buf ip netns exec "$nsA" "$peer" initiator --iface "$vA" --peer "$net.2:$port" --size "$size" \
        --requests 4 --fault "kill -9 $pid"
    rc=$?
    [ $rc = 0 ] || { cat "$out"; fail "the initiator exited with status $rc (its FAILED line above the target's output)"; }
    ;;
linkdown)
    LF_PEER_BUF=$buf ip netns exec "$nsA" "$peer" initiator --iface "$vA" --peer "$net.2:$port" --size "$size" \
        --requests 4 --fault "ip link set $vA down"
    rc=$?
    [ $rc = 0 ] || { cat "$out"; fail "the initiator exited with status $rc (its FAILED line above the target's output)"; }
    # The requests carried the notification "never": each failed, so the
    # target (alive behind the dead link) must not have seen one.
    if grep -q '^notif never' "$out"; then
        cat "$out"
        fail "the target was notified of a request that failed ('notif never' above)"
    fi
    echo "target: $(grep -c '^notif never' "$out") notifications of the failed requests"
    ;;
*)
    echo "unknown mode $mode"
    exit 2
    ;;
esac
exit 0
