# Listening TCP sockets of a process tree, read from /proc (sourced by e2e
# tests; not a test itself):
#   watch_listeners PID     # every listening "ADDR:PORT" (kernel hex) of PID
#                           # and its descendants, sampled until PID exits
#   is_loopback ADDR:PORT   # 127.0.0.0/8, ::1 or ::ffff:127.x.y.z
listening_addrs() {
  local queue=("$1") pids=() p inodes
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}"); pids+=("$p")
    queue+=($(pgrep -P "$p" || true))
  done
  inodes="$(for p in "${pids[@]}"; do find "/proc/$p/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null; done |
            tr -dc '0-9\n' | tr '\n' ' ')"
  [[ -n "${inodes// /}" ]] || return 0
  # /proc/net/tcp*: field 2 local address, 4 state (0A = LISTEN), 10 inode.
  awk -v inodes="$inodes" 'BEGIN { n = split(inodes, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    FNR > 1 && $4 == "0A" && ($10 in want) { print $2 }' /proc/net/tcp /proc/net/tcp6
}
running() { [[ -r /proc/$1/stat ]] && [[ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
watch_listeners() {
  while running "$1"; do listening_addrs "$1"; sleep 0.2; done | sort -u
}
is_loopback() {
  local a=${1%%:*}  # IPv4: one little-endian word; IPv6: four of them
  [[ $a == ??????7F || $a == 00000000000000000000000001000000 || $a == 0000000000000000FFFF0000??????7F ]]
}
