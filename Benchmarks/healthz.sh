#!/usr/bin/env bash
# Side-by-side HTTP benchmark: Herald's GET /healthz against a plain C libmicrohttpd server
# (Benchmarks/c-hello/hello.c) answering the same body. See Benchmarks/README.md.
#
# Usage: Benchmarks/healthz.sh [--only-c] [ROUNDS=3] [DURATION=5s]
#   --only-c (or SKIP_HERALD=1)  measure the C server alone (no swift build, no Herald)
#   HELLO_THREADS=N              thread pool size of the C server (default 1, as Herald's default)
#   HERALD_BIN=PATH              use this Herald binary instead of building one
#
# Progress goes to stderr, the Markdown report to stdout. Raw wrk output and a TSV of every run
# are left in Benchmarks/out/.
set -euo pipefail

usage() {
    sed -n '5,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# MARK: Arguments

ONLY_C=0
[[ "${SKIP_HERALD:-0}" == 1 ]] && ONLY_C=1
positional=()
for arg in "$@"; do
    case "$arg" in
        --only-c) ONLY_C=1 ;;
        -h | --help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option: $arg" ;;
        *) positional+=("$arg") ;;
    esac
done
(( ${#positional[@]} <= 2 )) || { usage >&2; die "too many arguments"; }
ROUNDS="${positional[0]:-3}"
DURATION="${positional[1]:-5s}"
HELLO_THREADS="${HELLO_THREADS:-1}"

[[ "$ROUNDS" =~ ^[1-9][0-9]{0,2}$ ]] || die "ROUNDS must be an integer from 1 to 999, not '$ROUNDS'"
[[ "$DURATION" =~ ^([1-9][0-9]{0,4})([smh]?)$ ]] || die "DURATION must look like 5, 5s, 2m or 1h, not '$DURATION'"
case "${BASH_REMATCH[2]}" in
    m) DURATION_S=$(( BASH_REMATCH[1] * 60 )) ;;
    h) DURATION_S=$(( BASH_REMATCH[1] * 3600 )) ;;
    *) DURATION_S=${BASH_REMATCH[1]} ;;
esac
[[ "$HELLO_THREADS" =~ ^[1-9][0-9]{0,2}$ ]] || die "HELLO_THREADS must be a positive integer, not '$HELLO_THREADS'"

# Every wrk run gets a hard limit well past its own duration, so nothing here can hang.
WRK_LIMIT=$(( DURATION_S + 30 ))
CONNECTIONS=32
READY_TIMEOUT_S=30
STOP_TIMEOUT_S=15

# MARK: Locations

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/Benchmarks/out"
mkdir -p "$OUT"
RESULTS="$OUT/results.tsv"
rm -f "$OUT"/wrk-*.txt "$OUT"/herald.log "$RESULTS"   # no stale runs mixed into this one

# MARK: Processes

C_PID=""
HERALD_PID=""
DATA_DIR=""

# Prints the state letter of a process (R, S, Z, ...); fails if there is no such process.
proc_state() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"          # the command name may contain spaces and parentheses
    printf '%s\n' "${stat%% *}"
}

# True while the process runs (an unreaped child that has exited is a zombie, not alive).
alive() {
    local state
    state="$(proc_state "$1")" || return 1
    [[ "$state" != Z && "$state" != X ]]
}

# utime + stime of the whole process (all its threads, live and exited), in clock ticks.
cpu_ticks() {
    local stat fields
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || die "process $1 is gone"
    stat="${stat##*) }"
    read -ra fields <<<"$stat"
    # After "comm)", field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    printf '%s\n' $(( fields[11] + fields[12] ))
}

# Sends SIGTERM, waits at most STOP_TIMEOUT_S, then SIGKILL. Sets STOP_STATUS to the exit status.
stop_process() {
    local pid="$1" i
    STOP_STATUS=0
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < STOP_TIMEOUT_S * 10; i++ )); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        log "process $pid ignored SIGTERM for ${STOP_TIMEOUT_S} s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || STOP_STATUS=$?
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [[ -n "$C_PID" ]]; then stop_process "$C_PID"; fi
    if [[ -n "$HERALD_PID" ]]; then stop_process "$HERALD_PID"; fi
    if [[ -n "$DATA_DIR" ]]; then rm -rf "$DATA_DIR"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Waits (at most READY_TIMEOUT_S) until GET /healthz answers; fails early if the server exits.
wait_ready() {
    local name="$1" pid="$2" port="$3" logfile="$4" body deadline
    deadline=$(( SECONDS + READY_TIMEOUT_S ))
    while (( SECONDS < deadline )); do
        if ! alive "$pid"; then
            tail -n 20 "$logfile" >&2 || true
            die "$name exited before answering on 127.0.0.1:$port (log: $logfile)"
        fi
        if body="$(curl -fsS --max-time 2 "http://127.0.0.1:$port/healthz" 2>/dev/null)"; then
            [[ "$body" == '{"status":"ok"}' ]] || log "warning: $name /healthz answered '$body', not '{\"status\":\"ok\"}'"
            log "$name is ready on 127.0.0.1:$port (pid $pid)"
            return 0
        fi
        sleep 0.2
    done
    tail -n 20 "$logfile" >&2 || true
    die "$name did not answer GET http://127.0.0.1:$port/healthz within ${READY_TIMEOUT_S} s (log: $logfile)"
}

# MARK: wrk

ensure_wrk() {
    command -v wrk >/dev/null 2>&1 && return 0
    local sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "wrk is missing and installing it needs root (apt-get install wrk)"
        sudo=(sudo)
    fi
    log "installing wrk with apt-get"
    if ! ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y wrk >&2; then
        ${sudo[@]+"${sudo[@]}"} apt-get update >&2
        ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y wrk >&2
    fi
    command -v wrk >/dev/null 2>&1 || die "wrk is still missing after apt-get install"
}

run_wrk() {
    local port="$1" duration="$2"
    timeout --kill-after=5 "$WRK_LIMIT" \
        wrk -t1 -c"$CONNECTIONS" -d"$duration" --latency "http://127.0.0.1:$port/healthz"
}

# Converts a wrk time ("812.00us", "1.23ms", "2.00s", "1.00m") to microseconds.
to_us() {
    awk -v t="$1" 'BEGIN {
        if (match(t, /^[0-9.]+/) == 0) exit 1
        n = substr(t, 1, RLENGTH); u = substr(t, RLENGTH + 1)
        if (u == "us") f = 1; else if (u == "ms") f = 1e3; else if (u == "s") f = 1e6
        else if (u == "m") f = 6e7; else if (u == "h") f = 3.6e9; else exit 1
        printf "%.1f\n", n * f
    }'
}

# Parses one wrk --latency output file. Prints "REQ_PER_SEC P99_US REQUESTS".
parse_wrk() {
    local file="$1" rps p99 requests p99_us
    rps="$(awk '$1 == "Requests/sec:" { print $2; exit }' "$file")"
    p99="$(awk '/Latency Distribution/ { d = 1; next } d && $1 == "99%" { print $2; exit }' "$file")"
    requests="$(awk '$2 == "requests" && $3 == "in" { print $1; exit }' "$file")"
    [[ "$rps" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "no Requests/sec line in $file"
    [[ "$requests" =~ ^[0-9]+$ ]] || die "no 'N requests in' line in $file"
    (( requests > 0 )) || die "wrk completed no requests ($file)"
    p99_us="$(to_us "$p99")" || die "no 99% latency line (or unknown unit '$p99') in $file"
    if grep -q 'Non-2xx or 3xx responses' "$file"; then
        log "warning: $(grep 'Non-2xx or 3xx responses' "$file" | sed 's/^ *//') ($file)"
    fi
    if grep -q 'Socket errors' "$file"; then
        log "warning: $(grep 'Socket errors' "$file" | sed 's/^ *//') ($file)"
    fi
    printf '%s %s %s\n' "$rps" "$p99_us" "$requests"
}

# Runs one measured wrk against a server and appends a row to RESULTS.
measure() {
    local name="$1" pid="$2" port="$3" round="$4" file before after parsed rps p99_us requests cpu_us
    file="$OUT/wrk-$name-$round.txt"
    alive "$pid" || die "$name (pid $pid) is no longer running"
    before="$(cpu_ticks "$pid")"
    run_wrk "$port" "$DURATION" >"$file" 2>&1 || { cat "$file" >&2; die "wrk against $name failed (round $round)"; }
    after="$(cpu_ticks "$pid")"
    parsed="$(parse_wrk "$file")"    # an assignment, so a parse failure stops the script
    read -r rps p99_us requests <<<"$parsed"
    cpu_us="$(awk -v d=$(( after - before )) -v hz="$CLK_TCK" -v n="$requests" \
        'BEGIN { printf "%.2f\n", d * 1e6 / hz / n }')"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "$rps" "$p99_us" "$cpu_us" "$requests" >>"$RESULTS"
    log "$(printf 'round %s/%s  %-7s %10.0f req/s  p99 %8.3f ms  CPU %7.2f us/req  (%s requests)' \
        "$round" "$ROUNDS" "$name" "$rps" "$(awk -v u="$p99_us" 'BEGIN { print u / 1000 }')" "$cpu_us" "$requests")"
}

# Prints min, median and max of column COL (3 = req/s, 4 = p99 us, 5 = CPU us/req) for NAME.
stats() {
    local name="$1" col="$2"
    awk -F '\t' -v n="$name" -v c="$col" '$1 == n { print $c }' "$RESULTS" | sort -g |
        awk '{ a[NR] = $1 } END {
            if (NR == 0) exit 1
            m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
            printf "%s %s %s\n", a[1], m, a[NR]
        }'
}

# MARK: Build

CLK_TCK="$(getconf CLK_TCK)"
[[ "$CLK_TCK" =~ ^[1-9][0-9]*$ ]] || die "getconf CLK_TCK gave '$CLK_TCK'"
for tool in gcc pkg-config curl python3 timeout; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done
ensure_wrk

log "building Benchmarks/c-hello/hello.c"
MHD_FLAGS="$(pkg-config --cflags --libs libmicrohttpd)" || die "pkg-config cannot find libmicrohttpd (apt-get install libmicrohttpd-dev)"
read -ra mhd_flags <<<"$MHD_FLAGS"
gcc -O2 -Wall -Wextra -o "$OUT/hello" "$ROOT/Benchmarks/c-hello/hello.c" ${mhd_flags[@]+"${mhd_flags[@]}"}

if (( ONLY_C == 0 )); then
    if [[ -n "${HERALD_BIN:-}" ]]; then
        [[ -x "$HERALD_BIN" ]] || die "HERALD_BIN=$HERALD_BIN is not executable"
        log "using HERALD_BIN=$HERALD_BIN (no swift build)"
    else
        HERALD_BIN="$ROOT/.build-release/release/herald"
        command -v swift >/dev/null 2>&1 || die "swift is required (or use --only-c)"
        log "building Herald (make release)"
        make -C "$ROOT" --no-print-directory release >&2
        [[ -x "$HERALD_BIN" ]] || die "swift build succeeded but $HERALD_BIN is missing"
    fi
fi

# MARK: Start

C_PORT="$(free_port)"
HERALD_PORT=""
if (( ONLY_C == 0 )); then
    for (( i = 0; i < 20; i++ )); do
        HERALD_PORT="$(free_port)"
        [[ "$HERALD_PORT" != "$C_PORT" ]] && break
    done
    [[ "$HERALD_PORT" != "$C_PORT" ]] || die "could not pick two distinct free ports"
fi

log "starting C server: hello $C_PORT $HELLO_THREADS"
"$OUT/hello" "$C_PORT" "$HELLO_THREADS" >"$OUT/hello.log" 2>&1 &
C_PID=$!
wait_ready c "$C_PID" "$C_PORT" "$OUT/hello.log"

SERVERS=(c)
if (( ONLY_C == 0 )); then
    DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/herald-bench.XXXXXX")"
    log "starting Herald: herald serve --host 127.0.0.1 --port $HERALD_PORT --data-dir $DATA_DIR --log-level warning"
    "$HERALD_BIN" serve --host 127.0.0.1 --port "$HERALD_PORT" --data-dir "$DATA_DIR" --log-level warning \
        >"$OUT/herald.log" 2>&1 &
    HERALD_PID=$!
    wait_ready herald "$HERALD_PID" "$HERALD_PORT" "$OUT/herald.log"
    SERVERS+=(herald)
fi

pid_of() { if [[ "$1" == c ]]; then echo "$C_PID"; else echo "$HERALD_PID"; fi; }
port_of() { if [[ "$1" == c ]]; then echo "$C_PORT"; else echo "$HERALD_PORT"; fi; }

# MARK: Measure

for name in "${SERVERS[@]}"; do
    log "warming up $name (1 s)"
    run_wrk "$(port_of "$name")" 1s >"$OUT/wrk-$name-warmup.txt" 2>&1 ||
        { cat "$OUT/wrk-$name-warmup.txt" >&2; die "warm-up wrk against $name failed"; }
done

printf 'server\tround\treq_per_sec\tp99_us\tcpu_us_per_req\trequests\n' >"$RESULTS"
for (( round = 1; round <= ROUNDS; round++ )); do
    for name in "${SERVERS[@]}"; do
        measure "$name" "$(pid_of "$name")" "$(port_of "$name")" "$round"
    done
done

# MARK: Stop

STATUS=0
stop_process "$C_PID"
C_STATUS=$STOP_STATUS
C_PID=""
(( C_STATUS == 0 )) || log "warning: the C server exited with status $C_STATUS on SIGTERM"
if (( ONLY_C == 0 )); then
    stop_process "$HERALD_PID"
    HERALD_STATUS=$STOP_STATUS
    HERALD_PID=""
fi

# MARK: Report

label_of() { if [[ "$1" == c ]]; then echo "C libmicrohttpd (c-hello)"; else echo "Herald"; fi; }

echo "## GET /healthz: Herald vs. plain C libmicrohttpd"
echo
echo "$ROUNDS round(s) of \`wrk -t1 -c$CONNECTIONS -d$DURATION --latency\` per server, run alternately," \
    "loopback, $(nproc) CPU(s), C server with $HELLO_THREADS thread(s), $(date -u '+%Y-%m-%d %H:%M UTC')."
echo
echo "| Server | median req/s | min req/s | max req/s | median p99 (ms) | median CPU (µs/req) |"
echo "|---|---:|---:|---:|---:|---:|"
declare -A MEDIAN_RPS MEDIAN_CPU
for name in "${SERVERS[@]}"; do
    rps_stats="$(stats "$name" 3)"
    p99_stats="$(stats "$name" 4)"
    cpu_stats="$(stats "$name" 5)"
    read -r rps_min rps_med rps_max <<<"$rps_stats"
    read -r _ p99_med _ <<<"$p99_stats"
    read -r _ cpu_med _ <<<"$cpu_stats"
    MEDIAN_RPS[$name]=$rps_med
    MEDIAN_CPU[$name]=$cpu_med
    printf '| %s | %.0f | %.0f | %.0f | %.3f | %.2f |\n' "$(label_of "$name")" \
        "$rps_med" "$rps_min" "$rps_max" "$(awk -v u="$p99_med" 'BEGIN { print u / 1000 }')" "$cpu_med"
done
echo
if (( ONLY_C == 0 )); then
    awk -v h="${MEDIAN_RPS[herald]}" -v c="${MEDIAN_RPS[c]}" \
        'BEGIN { printf "**Herald/C median req/s: %.2f**\n", h / c }'
    awk -v h="${MEDIAN_CPU[herald]}" -v c="${MEDIAN_CPU[c]}" \
        'BEGIN { if (c > 0) printf "(Herald/C median CPU per request: %.2f)\n", h / c }'
    echo
    echo "Herald exit status on SIGTERM: $HERALD_STATUS"
    if (( HERALD_STATUS != 0 )); then
        log "Herald did not exit 0 on SIGTERM (status $HERALD_STATUS, log: $OUT/herald.log)"
        STATUS=1
    fi
else
    echo "Herald/C median req/s: n/a (Herald skipped)"
    echo
fi
echo "C server exit status on SIGTERM: $C_STATUS"
log "raw wrk output and $RESULTS are in $OUT"
exit "$STATUS"
