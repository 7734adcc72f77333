#!/bin/sh
# takeover_remote.sh LF_TAKEOVER - docs/trust.md claim 16 where the owner
# cannot look at the peer's process: "victim" runs in another network
# namespace and its own pid namespace, reached over libfabric (tcp), so its
# liveness is what the backend heard (peer_alive), not /proc.
#   1. victim sends its metadata; the owner connects to it (heartbeats);
#   2. another instance named victim sends while victim lives: NAME_TAKEN;
#   3. victim is killed; 1 s later (three heartbeats of silence) the
#      other instance's metadata is a restart: accepted.
# Needs root (namespaces, veth); exits 77 with the reason otherwise.
set -u
prog=$1
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "takeover_remote: FAILED: $*"
    exit 1
}
[ "$(id -u)" = 0 ] || skip "creating network and pid namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no unshare command (util-linux)"
unshare -p -f --mount-proc true 2>/dev/null || skip "cannot create a pid namespace here"
tag=$$
nsA=nixlA$tag
nsB=nixlB$tag
vA=nxa$tag
vB=nxb$tag
net=10.214.$((tag % 250 + 1))
out=$(mktemp)
vout=$(mktemp)
opid=
vpid=
cleanup() {
    [ -n "$opid" ] && kill -9 "$opid" 2>/dev/null
    [ -n "$vpid" ] && kill -9 "$vpid" 2>/dev/null
    ip netns del "$nsA" 2>/dev/null
    ip netns del "$nsB" 2>/dev/null
    rm -f "$out" "$vout"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$(dirname "$0")/../netns/netns_pair.sh"
netns_pair_up

# The owner in nsA.
ip netns exec "$nsA" "$prog" owner "$vA" >"$out" 2>&1 &
opid=$!
i=0
until grep -q '^ready ' "$out"; do
    i=$((i + 1))
    [ $i -gt 100 ] && { cat "$out"; fail "the owner printed no 'ready' line within 10 s"; }
    sleep 0.1
done
port=$(sed -n 's/^ready //p' "$out")

# 1. victim, in nsB and a pid namespace of its own, stays.
ip netns exec "$nsB" unshare -p -f --kill-child --mount-proc "$prog" send "$vB" "$net.1" "$port" stay >"$vout" 2>&1 &
vpid=$!
i=0
until grep -q '^connected ' "$out"; do
    i=$((i + 1))
    [ $i -gt 150 ] && { cat "$out" "$vout"; fail "the owner did not connect to victim within 15 s"; }
    sleep 0.1
done
grep -q '^send NIXL_OK' "$vout" || { cat "$vout"; fail "victim's own SEND was not accepted"; }
grep -q '^connected NIXL_OK' "$out" || { cat "$out"; fail "the owner could not connect to victim"; }
sleep 0.5 # a few heartbeats each way

# 2. Another instance under victim's name while victim lives.
got=$(ip netns exec "$nsB" unshare -p -f --mount-proc "$prog" send "$vB" "$net.1" "$port" 2>&1)
echo "another instance while victim lives: $got"
echo "$got" | grep -q '^send NIXL_ERR_NAME_TAKEN' || { cat "$out"; fail "expected NIXL_ERR_NAME_TAKEN"; }
grep -q 'a backend heard from it just now' "$out" ||
    { cat "$out"; fail "the owner's log does not say the backend's liveness refused it"; }

# 3. victim dies; after three heartbeats of silence the name is free.
kill -9 "$vpid"
wait "$vpid" 2>/dev/null
vpid=
sleep 1
got=$(ip netns exec "$nsB" unshare -p -f --mount-proc "$prog" send "$vB" "$net.1" "$port" 2>&1)
echo "another instance after victim was killed: $got"
echo "$got" | grep -q '^send NIXL_OK' || { cat "$out"; fail "a restart after victim died was refused"; }
echo "takeover_remote: all checks passed"
exit 0
