# Shared by the two-host e2e scripts and rigs (sourced; not a test itself):
# two network namespaces joined by a veth pair, each with only loopback and
# its end of the pair, at NET.1 and NET.2: two hosts on one machine.
#   make_pair PREFIX NET     # NET: the first three octets, e.g. 10.213.7
#                            # sets NA NB (namespaces), VA VB (their ends), ADDR_A ADDR_B
#   pair_bytes NS DEV rx|tx  # bytes through one end so far (needs PY)
#   shape_pair RATE          # tc tbf on both ends (e.g. 100mbit)
#   remove_pair              # call from the EXIT trap
#   trap end_pair EXIT       # a test's whole clean-up: its children (launch_common.sh), the pair, $TMP
# A machine that cannot make them (no iproute2, not root, no netns or veth)
# ends the caller with `skip` where the caller has it (tests: exit 77), else
# with exit 1 and the reason.
PAIR_MADE=()

pair_refuse() {
  if declare -F skip >/dev/null; then skip "$1"; fi
  echo "two hosts: $1" >&2
  exit 1
}

make_pair() {
  local prefix="$1" net="$2" n out
  NA="${prefix}A$$"; NB="${prefix}B$$"; VA="${prefix}va$$"; VB="${prefix}vb$$"  # names: at most 15 characters
  ADDR_A="$net.1"; ADDR_B="$net.2"
  command -v ip >/dev/null || pair_refuse "ip not installed: Debian's iproute2 is missing (scripts/setup.sh installs it)"
  [[ $(id -u) -eq 0 ]] || pair_refuse "network namespaces need root (running as uid $(id -u))"
  for n in "$NA" "$NB"; do
    out="$(ip netns add "$n" 2>&1)" || pair_refuse "network namespaces cannot be made here: ip netns add $n: $out"
    PAIR_MADE+=("$n")
  done
  out="$(ip link add "$VA" type veth peer name "$VB" 2>&1)" || pair_refuse "veth pairs cannot be made here: $out"
  ip link set "$VA" netns "$NA"
  ip link set "$VB" netns "$NB"
  ip -n "$NA" addr add "$ADDR_A/24" dev "$VA"
  ip -n "$NB" addr add "$ADDR_B/24" dev "$VB"
  for n in "$NA" "$NB"; do ip -n "$n" link set lo up; done
  ip -n "$NA" link set "$VA" up
  ip -n "$NB" link set "$VB" up
}

pair_bytes() {
  ip -n "$1" -s -j link show dev "$2" | "$PY" -c "import json, sys; print(json.load(sys.stdin)[0]['stats64']['$3']['bytes'])"
}

shape_pair() {
  local n v
  for n in "$NA:$VA" "$NB:$VB"; do
    v="${n#*:}"; n="${n%%:*}"
    ip netns exec "$n" tc qdisc replace dev "$v" root tbf rate "$1" burst 256kbit latency 400ms
  done
}

remove_pair() {
  local n
  for n in "${PAIR_MADE[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  [[ -z "${VA:-}" ]] || ip link del "$VA" 2>/dev/null || true  # only if it never moved into a namespace
}

end_pair() {
  set +e
  if declare -F kill_children >/dev/null; then kill_children; fi
  remove_pair
  [[ -z "${TMP:-}" ]] || rm -rf "$TMP"
}
