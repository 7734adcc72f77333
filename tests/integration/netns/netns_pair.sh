# netns_pair.sh - sourced by twohost.sh, netfaults.sh and
# ../libfabric/takeover_remote.sh: two network namespaces $nsA and $nsB
# joined by the veth pair $vA / $vB, addressed $net.1 and $net.2 (/24),
# loopback up, both ends with carrier (libfabric lists an interface only
# then); and the netns_peer target started in $nsB.  The caller sets those
# variables (and $peer, $out), defines skip (exits 77 with its reason) and
# removes the namespaces on exit.
#
# For netns_target_start the caller also sets $peer_opts, the peer's
# options for both sides (the backend, its params and env: netns_peer.c's
# header) as words, none holding a space (the callers run with set -f, so
# they are not globbed either), and $own_pidns: 1 runs the target in a pid
# namespace of its own as well, as on a host of its own (the initiator
# cannot look at its process: no pidfd, the backend's own liveness is what
# tells a death).
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
    if [ "${own_pidns:-0}" = 1 ]; then
        command -v unshare >/dev/null 2>&1 || skip "no unshare command (util-linux)"
        command -v pgrep >/dev/null 2>&1 || skip "no pgrep command (procps)"
        unshare -p -f --mount-proc true 2>/dev/null || skip "cannot create a pid namespace here"
    fi
}

# netns_target_start SIZE: the netns_peer target ($peer $peer_opts) in $nsB
# on $vB, its output in $out, the pid to kill for cleanup in $tpid; returns
# once it printed "ready PORT PID BUF", with $tport, $tbuf and $thpid (its
# pid as this namespace sees it: what a fault kills).  Skips when the target
# skipped (exit 77: its backend cannot be made here); exits 1 with its
# output when it printed no "ready" within 10 s.
netns_target_start() {
    if [ "${own_pidns:-0}" = 1 ]; then
        # unshare forks the target (pid 1 of its namespace) and waits for
        # it; --kill-child ends the target when unshare is killed.
        # shellcheck disable=SC2086 # $peer_opts: one word each
        ip netns exec "$nsB" unshare -p -f --kill-child --mount-proc \
            "$peer" target --iface "$vB" --size "$1" $peer_opts >"$out" 2>&1 &
    else
        # shellcheck disable=SC2086
        ip netns exec "$nsB" "$peer" target --iface "$vB" --size "$1" $peer_opts >"$out" 2>&1 &
    fi
    tpid=$!
    i=0
    while ! grep -q '^ready ' "$out" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 100 ] || ! kill -0 "$tpid" 2>/dev/null; then
            if kill -0 "$tpid" 2>/dev/null; then
                cat "$out"
                echo "FAILED: the netns_peer target printed no 'ready' line within 10 s (its output above)"
                exit 1
            fi
            wait "$tpid"
            trc=$?
            tpid=
            cat "$out"
            [ $trc = 77 ] && skip "the target skipped (its reason above)"
            echo "FAILED: the netns_peer target exited with status $trc before printing 'ready' (its output above)"
            exit 1
        fi
        sleep 0.1
    done
    ready=$(grep '^ready ' "$out")
    tport=$(echo "$ready" | cut -d' ' -f2)
    tbuf=$(echo "$ready" | cut -d' ' -f4)
    thpid=$(echo "$ready" | cut -d' ' -f3)
    if [ "${own_pidns:-0}" = 1 ]; then
        thpid=$(pgrep -P "$tpid")
        [ -n "$thpid" ] || { cat "$out"; echo "FAILED: no target process under unshare (pid $tpid)"; exit 1; }
    fi
}
