# netns_pair.sh - sourced by twohost.sh and netfaults.sh: two network
# namespaces $nsA and $nsB joined by the veth pair $vA / $vB, addressed
# $net.1 and $net.2 (/24), loopback up, both ends with carrier (libfabric
# lists an interface only then); and the lf_peer target started in $nsB.
# The caller sets those variables (and $peer, $out), defines skip (exits
# 77 with its reason) and removes the namespaces on exit.
netns_pair_up() {
    ip netns add "$nsA" 2>/dev/null || skip "cannot create network namespaces here"
    ip netns add "$nsB" || exit 1
    ip link add "$vA" netns "$nsA" type veth peer name "$vB" netns "$nsB" 2>/dev/null ||
        skip "cannot create a veth pair"
    ip -n "$nsA" addr add "$net.1/24" dev "$vA" && ip -n "$nsB" addr add "$net.2/24" dev "$vB" || exit 1
    for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up || exit 1; done
    ip -n "$nsA" link set "$vA" up && ip -n "$nsB" link set "$vB" up || exit 1
    i=0
    until ip -n "$nsA" link show "$vA" | grep -q LOWER_UP && ip -n "$nsB" link show "$vB" | grep -q LOWER_UP; do
        i=$((i + 1))
        [ $i -gt 50 ] && { echo "FAILED: the veth pair did not come up within 5 s"; exit 1; }
        sleep 0.1
    done
}

# netns_target_start SIZE: lf_peer ($peer) target in $nsB on $vB, its output
# in $out, its pid in $tpid; returns once it printed "ready PORT PID BUF"
# (exits 1 with its output when it does not within 10 s).
netns_target_start() {
    ip netns exec "$nsB" "$peer" target --iface "$vB" --size "$1" >"$out" 2>&1 &
    tpid=$!
    i=0
    while ! grep -q '^ready ' "$out" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 100 ] || ! kill -0 "$tpid" 2>/dev/null; then
            cat "$out"
            if kill -0 "$tpid" 2>/dev/null; then
                echo "FAILED: the lf_peer target printed no 'ready' line within 10 s (its output above)"
            else
                echo "FAILED: the lf_peer target exited before printing 'ready' (its output above)"
            fi
            exit 1
        fi
        sleep 0.1
    done
}
