#!/bin/sh
# conformance_netns.sh CONFORMANCE [KEY=VALUE...] -- ARG... - the
# conformance battery (tests/conformance) between two network namespaces
# joined by a veth pair: the cases run in one, every target process in the
# other (conformance --procs 2 --target-netns, its listener reached at the
# other end's address).  Each KEY=VALUE is put in the environment of both
# sides, "@IF" in it standing for the interface (both ends of the pair have
# the same name, so one value serves both: UCX_NET_DEVICES=@IF).  ARGs go
# to the battery (--backend NAME ...).  Same host, same pid namespace: the
# backend's pidfd on the target still applies; twohost.sh is where a peer
# of another pid namespace dies.  Needs root (namespaces, veth); exits 77
# with the reason otherwise, and with the battery's own status else.
set -u
set -f
conformance=$1
shift
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
tag=$$
nsA=nxcA$tag
nsB=nxcB$tag
vA=nxc$tag
vB=$vA
net=10.215.$((tag % 250 + 1))
cleanup() {
    ip netns del "$nsA" 2>/dev/null
    ip netns del "$nsB" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case "$1" in
    *=*) ;;
    *) echo "conformance_netns.sh: KEY=VALUE or -- expected, got $1" && exit 2 ;;
    esac
    key=${1%%=*}
    val=$(echo "${1#*=}" | sed "s/@IF/$vA/g")
    export "$key=$val"
    echo "conformance_netns: $key=$val"
    shift
done
[ $# -gt 0 ] && shift
. "$(dirname "$0")/netns_pair.sh"
netns_pair_up
echo "conformance_netns: cases in $nsA ($net.1), targets in $nsB ($net.2), both on $vA"
ip netns exec "$nsA" "$conformance" --procs 2 --target-netns "$nsB" --target-addr "$net.2" "$@"
