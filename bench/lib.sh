# shellcheck shell=bash
# shellcheck disable=SC2034 # globals set here are used by the run scripts
# bench/lib.sh: the measuring method shared by bench/run, bench/static/run and
# bench/engine/run. Source it; it defines functions and a few variables, and starts
# nothing by itself.
#
#   process tracking   bench_start NAME LOG cmd...   (every child is stopped on exit),
#                      bench_stop PID
#   tools              bench_ensure_packages, bench_ensure_tools
#   content            bench_gen_small DIR, bench_gen_big DIR
#   contenders         bench_nginx_conf, bench_start_nginx, bench_start_hayate,
#                      bench_start_simple, bench_build_c, bench_build_hayate
#   measuring          bench_preflight, bench_measure (bench/lablib.py measure --legacy:
#                      warm-up, load tool, /proc CPU, raw.csv row)
#   report             bench_summarize RAW > SUMMARY, bench_get SUMMARY KEY FIELD
#
# Paths in generated files are absolute only inside the run's tmp dir, which is deleted.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$BENCH_DIR/.." && pwd)
CLK_TCK=$(getconf CLK_TCK)
SERVER_CPU=${SERVER_CPU:-0} # the core every server is pinned to
CLIENT_CPU=${CLIENT_CPU:-1} # the core wrk is pinned to
WARMUP_S=${WARMUP_S:-2}
PIPELINE_DEPTH=${PIPELINE_DEPTH:-16}

BENCH_PIDS=()      # servers we started, stopped in reverse order on exit
BENCH_RM_DIRS=()   # directories removed on exit (the run's tmp dir)
BENCH_USED_PORTS=" "

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- processes

# start time of a pid (field 22 of /proc/PID/stat), to never signal a recycled pid
_proc_start() {
    local s
    read -r s 2>/dev/null <"/proc/$1/stat" || return 1
    s=${s##*) }
    local -a f
    read -ra f <<<"$s"
    echo "${f[19]}"
}

# true while PID exists and is not a zombie
_proc_alive() {
    local s
    read -r s 2>/dev/null <"/proc/$1/stat" || return 1
    s=${s##*) }
    [[ ${s:0:1} != Z ]]
}

# PID and all its descendants, one per line
bench_proc_tree() {
    local root=$1 s p rest
    local -a f
    echo "$root"
    for s in /proc/[0-9]*/stat; do
        read -r rest 2>/dev/null <"$s" || continue
        p=${rest%% *}
        rest=${rest##*) }
        read -ra f <<<"$rest"
        if [[ ${f[1]} == "$root" ]]; then
            bench_proc_tree "$p"
        fi
    done
}

# sum of utime+stime (clock ticks) over the given pids
bench_cpu_ticks() {
    local t=0 p s
    local -a f
    for p in "$@"; do
        read -r s 2>/dev/null <"/proc/$p/stat" || continue
        s=${s##*) }
        read -ra f <<<"$s"
        t=$((t + f[11] + f[12]))
    done
    echo "$t"
}

# stop one process we started and its descendants: TERM, wait up to 5 s, then KILL
_bench_stop() {
    local pid=$1 start=$2 p i
    if ! _proc_alive "$pid" || [[ $(_proc_start "$pid") != "$start" ]]; then
        wait "$pid" 2>/dev/null || true # reap it if it died on its own
        return 0
    fi
    local -a tree=() starts=()
    for p in $(bench_proc_tree "$pid"); do
        tree+=("$p")
        starts+=("$(_proc_start "$p" || true)") # it may have exited since the listing
    done
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 50; i++)); do
        local alive=0
        for p in "${tree[@]}"; do _proc_alive "$p" && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for i in "${!tree[@]}"; do
        p=${tree[$i]}
        if _proc_alive "$p" && [[ $(_proc_start "$p") == "${starts[$i]}" ]]; then
            kill -KILL "$p" 2>/dev/null
        fi
    done
    wait "$pid" 2>/dev/null || true
    return 0
}

# bench_stop PID: stop one process started with bench_start (and its descendants) now
bench_stop() {
    local pid=$1 i entry
    for i in "${!BENCH_PIDS[@]}"; do
        entry=${BENCH_PIDS[$i]}
        if [[ ${entry%%:*} == "$pid" ]]; then
            _bench_stop "$pid" "${entry#*:}"
            unset 'BENCH_PIDS[i]'
        fi
    done
    BENCH_PIDS=("${BENCH_PIDS[@]}")
}

bench_cleanup() {
    local i entry d
    set +e # stop everything even if one step fails
    trap - EXIT INT TERM ERR
    for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do
        entry=${BENCH_PIDS[$i]}
        _bench_stop "${entry%%:*}" "${entry#*:}"
    done
    BENCH_PIDS=()
    for d in "${BENCH_RM_DIRS[@]}"; do
        if [[ -n $d && -d $d ]]; then rm -rf -- "$d"; fi
    done
    # a run that did not get to its report (error, Ctrl-C) leaves nothing behind unless
    # BENCH_KEEP_PARTIAL=1
    if [[ -n ${RUN_DIR:-} && -d $RUN_DIR && ! -s ${REPORT:-/nonexistent} && ${BENCH_KEEP_PARTIAL:-0} != 1 ]]; then
        log "incomplete run: removing ${RUN_DIR#"$REPO_ROOT"/} (BENCH_KEEP_PARTIAL=1 keeps it)"
        rm -rf -- "$RUN_DIR"
    fi
    return 0
}

bench_install_traps() {
    set -o errtrace
    trap 'log "failed (status $?) at ${BASH_SOURCE[0]##*/}:$LINENO: $BASH_COMMAND"' ERR
    trap bench_cleanup EXIT
    trap 'log "interrupted"; exit 130' INT
    trap 'log "terminated"; exit 143' TERM
}

# bench_start NAME LOG cmd... : start cmd in the background; sets BENCH_LAST_PID
bench_start() {
    local name=$1 logf=$2
    shift 2
    "$@" >"$logf" 2>&1 &
    BENCH_LAST_PID=$!
    BENCH_PIDS+=("$BENCH_LAST_PID:$(_proc_start "$BENCH_LAST_PID")")
    log "started $name (pid $BENCH_LAST_PID): $*"
}

# bench_wait_ready PID PORT LOG [PATTERN]: wait (10 s at most) until PID answers HTTP on
# PORT and, when PATTERN is given, LOG holds it (hayate announces its URL on stdout)
bench_wait_ready() {
    local pid=$1 port=$2 logf=$3 pattern=${4:-} i code
    for ((i = 0; i < 100; i++)); do
        if ! _proc_alive "$pid"; then
            log "process $pid exited; its log:"
            tail -n 20 "$logf" >&2
            return 1
        fi
        if [[ -z $pattern ]] || grep -qF -- "$pattern" "$logf" 2>/dev/null; then
            code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$port/" 2>/dev/null)
            [[ $code != 000 && -n $code ]] && return 0
        fi
        sleep 0.1
    done
    log "pid $pid not ready on port $port after 10 s; its log:"
    tail -n 20 "$logf" >&2
    return 1
}

# bench_pick_port [BASE]: sets BENCH_PORT to a free TCP port on 127.0.0.1 from BASE
# upwards, never one handed out before in this run (call it directly, not in $(...))
bench_pick_port() {
    local p=${1:-18080}
    while [[ $BENCH_USED_PORTS == *" $p "* ]] || (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
        p=$((p + 1))
    done
    BENCH_USED_PORTS+="$p "
    BENCH_PORT=$p
}

# bench_run_init [SUFFIX]: bench/runs/<date>-<host>[-SUFFIX]/ with raw.csv (header
# written) and a tmp/ dir removed on exit. Sets RUN_NAME RUN_DIR TMP RAW REPORT NOTES.
bench_run_init() {
    local base n=1
    base="$(date +%Y-%m-%dT%H%M)-$(hostname -s)${1:+-$1}"
    RUN_NAME=$base
    while [[ -e $BENCH_DIR/runs/$RUN_NAME ]]; do # never reuse the dir of another run
        n=$((n + 1))
        RUN_NAME="$base.$n"
    done
    RUN_DIR="$BENCH_DIR/runs/$RUN_NAME"
    TMP="$RUN_DIR/tmp"
    mkdir -p "$TMP"
    BENCH_RM_DIRS+=("$TMP")
    RAW="$RUN_DIR/raw.csv"
    REPORT="$RUN_DIR/report.md"
    NOTES="$TMP/notes"
    : >"$NOTES"
    echo "$BENCH_CSV_HEADER" >"$RAW"
}

# ---------------------------------------------------------------- tools and builds

# bench_ensure_packages "CMD:PACKAGE[ PACKAGE...]" ...: apt-get install the packages of every
# CMD that is not on PATH (nor in /usr/sbin); one apt-get update first, only when needed
bench_ensure_packages() {
    local missing=() sudo="" spec cmd
    local -a pk
    for spec in "$@"; do
        cmd=${spec%%:*}
        if ! command -v "$cmd" >/dev/null && ! compgen -G "/usr/sbin/$cmd" >/dev/null; then
            read -ra pk <<<"${spec#*:}"
            missing+=("${pk[@]}")
        fi
    done
    ((${#missing[@]})) || return 0
    [[ $(id -u) == 0 ]] || sudo=sudo
    log "installing ${missing[*]} with apt-get"
    $sudo apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2 ||
        die "apt-get install ${missing[*]} failed"
}

bench_ensure_tools() {
    bench_ensure_packages nginx:nginx wrk:wrk curl:curl "gcc:gcc libc6-dev" make:make taskset:util-linux
}

bench_nginx_bin() {
    command -v nginx 2>/dev/null || echo /usr/sbin/nginx
}

# bench_build_c OUTDIR: gcc -O2 the ceiling responder, the relay (a proxy's floor) and
# the sink client; sets CEILING_BIN, RELAY_BIN and SINK_BIN
bench_build_c() {
    local t
    for t in ceiling relay sink; do
        gcc -O2 -Wall -o "$1/$t" "$BENCH_DIR/ceiling/$t.c" >&2 || die "building $t.c failed"
    done
    CEILING_BIN=$1/ceiling
    RELAY_BIN=$1/relay
    SINK_BIN=$1/sink
}

# bench_build_hayate -> prints the binary path: the profile-guided release build (pgo/build),
# the one to deploy (docs/decisions/0013-pgo.md); with BENCH_PLAIN_BUILD=1, a plain
# `cargo build --release -p hayate`
bench_build_hayate() {
    if [[ -n ${BENCH_PLAIN_BUILD:-} ]]; then
        log "cargo build --release -p hayate"
        (cd "$REPO_ROOT" && cargo build --release -p hayate >&2) || return 1
        echo "${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/hayate"
        return
    fi
    log "pgo/build (a profile-guided release build: two builds and a training run)"
    "$REPO_ROOT/pgo/build" "$REPO_ROOT/target/pgo/hayate" >/dev/null || return 1
    echo "$REPO_ROOT/target/pgo/hayate"
}

# ---------------------------------------------------------------- content

# 1k.txt (1,024 B text), 5081.png (5,081 B: PNG magic + random), page.html (8,550 B)
bench_gen_small() {
    local dir=$1
    mkdir -p "$dir"
    local line='hayate bench lab: plain text served as a static file, one kibibyte of it.' text=""
    while ((${#text} < 1024)); do text+=$line$'\n'; done
    printf '%s' "${text:0:1024}" >"$dir/1k.txt"
    { printf '\x89PNG\r\n\x1a\n'; head -c $((5081 - 8)) /dev/urandom; } >"$dir/5081.png"
    _bench_gen_html >"$dir/page.html"
    local f want
    for f in 1k.txt:1024 5081.png:5081 page.html:8550; do
        want=${f#*:}
        [[ $(stat -c %s "$dir/${f%%:*}") == "$want" ]] || die "generated ${f%%:*} is not $want bytes"
    done
}

# a realistic 8,550-byte HTML page: head, nav, articles, footer; the last paragraph is cut
# to land on the exact size
_bench_gen_html() {
    local LC_ALL=C target=8550
    local head foot body="" para words i
    head='<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Release notes - hayate bench lab</title>
<link rel="stylesheet" href="/assets/site.3f9a1c.css">
<link rel="icon" href="/favicon.ico">
<script defer src="/assets/app.8d2e4b.js"></script>
</head>
<body>
<header class="site-header">
<a class="logo" href="/">hayate</a>
<nav><ul>
<li><a href="/docs/">Docs</a></li>
<li><a href="/blog/">Blog</a></li>
<li><a href="/download/">Download</a></li>
<li><a href="https://example.com/community">Community</a></li>
</ul></nav>
</header>
<main id="content">
'
    foot='</main>
<footer class="site-footer">
<p>&copy; 2024 The hayate authors. Licensed under MIT or Apache-2.0.</p>
<p><a href="/privacy/">Privacy</a> &middot; <a href="/imprint/">Imprint</a></p>
</footer>
</body>
</html>
'
    words='Static files are the bread and butter of every web server and the request path that serves them should be short, predictable and cheap. Each response carries a validator, a length and a type, and the bytes go out in as few system calls as the kernel allows. '
    for ((i = 1; ; i++)); do
        para="<article id=\"post-$i\">
<h2><a href=\"/blog/2024/post-$i/\">Notes on release $i</a></h2>
<p class=\"meta\">Posted on <time datetime=\"2024-03-$(printf %02d $((i % 28 + 1)))\">March $((i % 28 + 1)), 2024</time> by the team</p>
<p>$words$words</p>
<ul><li>Faster start-up</li><li>Smaller memory footprint</li><li>New <code>--listen</code> forms</li></ul>
</article>
"
        if ((${#head} + ${#body} + ${#para} + ${#foot} + 200 > target)); then
            break
        fi
        body+=$para
    done
    local open='<section class="more"><p>' close='</p></section>
'
    local fill=$((target - ${#head} - ${#body} - ${#foot} - ${#open} - ${#close}))
    local filler=""
    while ((${#filler} < fill)); do filler+=$words; done
    printf '%s%s%s%s%s%s' "$head" "$body" "$open" "${filler:0:fill}" "$close" "$foot"
}

bench_gen_big() {
    dd if=/dev/urandom of="$1/big.bin" bs=1M count=100 status=none || die "generating big.bin failed"
}

# ---------------------------------------------------------------- contenders

# bench_nginx_conf CONF PORT ROOT WORKDIR ACCESS_LOG(off|FILE) [HTTP_EXTRA [SERVER_BODY]]
# One worker, open_file_cache, sendfile + tcp_nopush, no access log (or the combined
# format with a 64k buffer), keep-alive without a request cap. Types inline: no
# dependency on the distribution's config. HTTP_EXTRA: more directives in http {};
# SERVER_BODY replaces "location / { }" (it may hold more "listen" lines and locations).
# Environment: NGINX_WORKERS (1), NGINX_WORKER_CONNECTIONS (4096), NGINX_SENDFILE (on).
bench_nginx_conf() {
    local conf=$1 port=$2 root=$3 work=$4 alog=$5 extra=${6:-} body=${7:-"location / { }"}
    local user_line="" alog_line conns=${NGINX_WORKER_CONNECTIONS:-4096} rlimit=""
    mkdir -p "$work"
    if [[ $(id -u) == 0 ]]; then
        user_line="user $(id -un) $(id -gn);" # the same user as the other contenders
    fi
    if [[ $alog == off ]]; then
        alog_line="access_log off;"
    else
        alog_line="access_log $alog combined buffer=64k;"
    fi
    if ((conns > 4096)); then rlimit="worker_rlimit_nofile $((conns * 2 + 100));"; fi
    cat >"$conf" <<EOF
$user_line
worker_processes ${NGINX_WORKERS:-1};
$rlimit
pid $work/nginx.pid;
error_log $work/error.log warn;
events {
    worker_connections $conns;
}
http {
    types {
        text/html html;
        text/plain txt;
        image/png png;
        application/json json;
        application/octet-stream bin;
    }
    default_type application/octet-stream;
    sendfile ${NGINX_SENDFILE:-on};
    tcp_nopush ${NGINX_TCP_NOPUSH:-on};
    tcp_nodelay on;
    $alog_line
    keepalive_requests 1000000;
    keepalive_timeout 65s;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    client_body_temp_path $work/client_body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    $extra
    server {
        listen 127.0.0.1:$port;
        server_name localhost;
        root $root;
        $body
    }
}
EOF
}

# bench_start_nginx NAME CONF WORKDIR PORT -> sets BENCH_LAST_PID (the master); pinned to
# NGINX_BENCH_CPUS (default $SERVER_CPU)
bench_start_nginx() {
    local name=$1 conf=$2 work=$3 port=$4
    bench_start "$name" "$work/stdout.log" taskset -c "${NGINX_BENCH_CPUS:-$SERVER_CPU}" "$(bench_nginx_bin)" \
        -p "$work/" -e "$work/error.log" -c "$conf" -g 'daemon off;'
    bench_wait_ready "$BENCH_LAST_PID" "$port" "$work/stdout.log" || die "$name did not start"
}

# bench_start_hayate NAME BIN ROOT PORT LOGDIR ACCESS_LOG(off|FILE) [ARGS...] -> BENCH_LAST_PID
# ARGS are added to the command line (--proxy ...). Environment: HAYATE_BENCH_WORKERS (1),
# HAYATE_BENCH_CPUS (the cores it is pinned to; default $SERVER_CPU).
bench_start_hayate() {
    local name=$1 bin=$2 root=$3 port=$4 logdir=$5 alog=$6
    shift 6
    # HAYATE_BENCH_NOFILE=N: hayate starts with a descriptor limit of N (soft and hard)
    local -a limit=()
    [[ -n ${HAYATE_BENCH_NOFILE:-} ]] && limit=(prlimit "--nofile=$HAYATE_BENCH_NOFILE:$HAYATE_BENCH_NOFILE" --)
    bench_start "$name" "$logdir/$name.log" "${limit[@]}" taskset -c "${HAYATE_BENCH_CPUS:-$SERVER_CPU}" "$bin" serve "$root" \
        --listen "127.0.0.1:$port" --workers "${HAYATE_BENCH_WORKERS:-1}" --access-log "$alog" "$@"
    bench_wait_ready "$BENCH_LAST_PID" "$port" "$logdir/$name.log" "http://127.0.0.1:$port/"
}

# bench_start_simple NAME BIN PORT LOGDIR -> BENCH_LAST_PID (ceiling, hyper-hello: ADDR arg)
bench_start_simple() {
    local name=$1 bin=$2 port=$3 logdir=$4
    bench_start "$name" "$logdir/$name.log" taskset -c "$SERVER_CPU" "$bin" "127.0.0.1:$port"
    bench_wait_ready "$BENCH_LAST_PID" "$port" "$logdir/$name.log" "http://127.0.0.1:$port/"
}

# ---------------------------------------------------------------- measuring

# bench_preflight URL EXPECTED_LEN [FILE] TMPDIR: GET must answer 200 with the expected
# Content-Length and body (compared with FILE when given). Prints the reason on failure.
bench_preflight() {
    local url=$1 want=$2 file=$3 tmp=$4 code cl size
    code=$(curl -s --max-time 20 -o "$tmp/preflight.body" -D "$tmp/preflight.head" -w '%{http_code}' "$url")
    cl=$(tr -d '\r' <"$tmp/preflight.head" | awk -F': *' 'tolower($1)=="content-length"{v=$2} END{print v}')
    size=$(stat -c %s "$tmp/preflight.body" 2>/dev/null || echo 0)
    local why=""
    if [[ $code != 200 ]]; then
        why="status $code"
    elif [[ $cl != "$want" ]]; then
        why="Content-Length '${cl}' (want $want)"
    elif [[ $size != "$want" ]]; then
        why="body of $size bytes (want $want)"
    elif [[ -n $file ]] && ! cmp -s "$tmp/preflight.body" "$file"; then
        why="body differs from the file"
    fi
    rm -f "$tmp/preflight.body" "$tmp/preflight.head"
    if [[ -n $why ]]; then
        echo "$why"
        return 1
    fi
    return 0
}

BENCH_CSV_HEADER="section,rep,server,file,mode,conns,duration_s,requests,rps,bytes,mb_per_s,server_cpu_s,server_cpu_pct,us_cpu_per_req,us_cpu_per_mb,client_cpu_pct,err_connect,err_read,err_write,err_status,err_timeout,errors,log_bytes_per_req,server_core_busy_pct,client_core_busy_pct,steal_pct"

# "busy total steal" ticks of one CPU from /proc/stat (busy: user nice system irq softirq
# steal; total adds idle and iowait)
_bench_core_ticks() {
    awk -v c="cpu$1" '$1 == c { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6, $9 }' /proc/stat
}

# bench_measure RAW SECTION REP SERVER FILE MODE CONNS SECONDS URL PID [ACCESS_LOG_FILE]
# Warm-up (same mode, WARMUP_S), then one measured run; appends one row to RAW (the
# BENCH_CSV_HEADER columns) and logs a one-line summary. MODE: keep-alive (wrk +
# wrk/summary.lua), pipelined (wrk + wrk/pipeline.lua, PIPELINE_DEPTH requests per send),
# sink (ceiling/sink.c: large bodies discarded in the kernel, so the client is not the
# bottleneck). The measuring itself (server CPU of PID's tree from /proc before and after,
# the load tool's CPU, per-core busy and steal time) is bench/lablib.py's `measure`,
# shared with bench/run.
bench_measure() {
    local raw=$1 section=$2 rep=$3 server=$4 file=$5 mode=$6 conns=$7 secs=$8 url=$9 pid=${10}
    local alog=${11:-}
    local -a opts
    case $mode in
    pipelined) opts=(--tool wrk --lua "$BENCH_DIR/wrk/pipeline.lua" --lua-arg "$PIPELINE_DEPTH") ;;
    keep-alive) opts=(--tool wrk) ;;
    sink) opts=(--tool sink --sink "$SINK_BIN") ;;
    *) die "unknown mode $mode" ;;
    esac
    if [[ -n $alog ]]; then opts+=(--access-log "$alog"); fi
    python3 "$BENCH_DIR/lablib.py" measure --raw "$raw" --legacy "$section,$rep,$server,$file,$mode" \
        --case "$section" --contender "$server" --conc "$conns" --secs "$secs" --warmup "$WARMUP_S" \
        --url "$url" --pids "$pid" --server-cpus "$SERVER_CPU" --client-cpus "$CLIENT_CPU" "${opts[@]}" ||
        log "measuring $server $file $mode failed"
}

# ---------------------------------------------------------------- report

# bench_summarize RAW -> one line per (section, server, file, mode), in first-seen order:
# key|n|rps med,min,max|us/req med,min,max|MB/s med,min,max|us/MB med,min,max|
#     server cpu% med|client cpu% med|errors sum|log bytes/req med|
#     server core busy% med|client core busy% med|steal% max
bench_summarize() {
    awk -F, '
    function med(s,   a, n, i, j, t) {
        n = split(s, a, " ")
        for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        if (n == 0) return ""
        if (n % 2) return a[(n + 1) / 2]
        return (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function mn(s,   a, n, i, m) { n = split(s, a, " "); m = a[1] + 0; for (i = 2; i <= n; i++) if (a[i] + 0 < m) m = a[i] + 0; return m }
    function mx(s,   a, n, i, m) { n = split(s, a, " "); m = a[1] + 0; for (i = 2; i <= n; i++) if (a[i] + 0 > m) m = a[i] + 0; return m }
    NR == 1 { next }
    {
        k = $1 "|" $3 "|" $4 "|" $5
        if (!(k in cnt)) { order[++nk] = k; cnt[k] = 0; err[k] = 0 }
        cnt[k]++
        rps[k] = rps[k] " " $9; upr[k] = upr[k] " " $14; mbs[k] = mbs[k] " " $11; upm[k] = upm[k] " " $15
        scpu[k] = scpu[k] " " $13; ccpu[k] = ccpu[k] " " $16; err[k] += $22
        sbusy[k] = sbusy[k] " " $24; cbusy[k] = cbusy[k] " " $25; steal[k] = steal[k] " " $26
        if ($23 != "") lbr[k] = lbr[k] " " $23
    }
    END {
        for (i = 1; i <= nk; i++) {
            k = order[i]
            printf "%s|%d|%s,%s,%s|%s,%s,%s|%s,%s,%s|%s,%s,%s|%s|%s|%d|%s|%s|%s|%s\n", k, cnt[k],
                med(rps[k]), mn(rps[k]), mx(rps[k]), med(upr[k]), mn(upr[k]), mx(upr[k]),
                med(mbs[k]), mn(mbs[k]), mx(mbs[k]), med(upm[k]), mn(upm[k]), mx(upm[k]),
                med(scpu[k]), med(ccpu[k]), err[k], med(lbr[k]), med(sbusy[k]), med(cbusy[k]), mx(steal[k])
        }
    }' "$1"
}

# bench_quiet_check [SECONDS]: how busy the two cores are before any contender runs;
# waits up to SECONDS (env BENCH_WAIT_QUIET, default 0) for both to fall under 10 %.
# Prints a note line when they stay busy.
bench_quiet_check() {
    local wait_s=${1:-${BENCH_WAIT_QUIET:-0}} t=0 a0 b0 a1 b1 busy
    while :; do
        a0=$(_bench_core_ticks "$SERVER_CPU")
        b0=$(_bench_core_ticks "$CLIENT_CPU")
        sleep 1
        a1=$(_bench_core_ticks "$SERVER_CPU")
        b1=$(_bench_core_ticks "$CLIENT_CPU")
        busy=$(awk -v a="$a0 $a1" -v b="$b0 $b1" 'BEGIN{
            split(a, x, " "); split(b, y, " ")
            p = x[5] > x[2] ? 100 * (x[4] - x[1]) / (x[5] - x[2]) : 0
            q = y[5] > y[2] ? 100 * (y[4] - y[1]) / (y[5] - y[2]) : 0
            printf "%.0f %.0f", p, q }')
        read -r a1 b1 <<<"$busy"
        if ((a1 < 10 && b1 < 10)); then return 0; fi
        t=$((t + 1))
        if ((t >= wait_s)); then
            echo "before the run the machine was busy: core $SERVER_CPU $a1 %, core $CLIENT_CPU $b1 % (other processes); expect noise"
            return 0
        fi
    done
}

# bench_load_warnings SUMMARY: one line per case where the server's core was
# busy with something else (core busy % more than 20 points above the server's own %)
# or the hypervisor stole time (> 5 %): those numbers are not reliable
bench_load_warnings() {
    awk -F'|' '{
        other = $14 - $10
        if (other > 20) printf "%s %s %s on %s: core busy %s %% but the server used %s %%: other load shared its core; numbers not reliable\n", $1, $3, $4, $2, $14, $10
        if ($16 + 0 > 5) printf "%s %s %s on %s: %s %% of CPU time stolen by the hypervisor\n", $1, $3, $4, $2, $16
    }' "$1"
}

# bench_get SUMMARY "section|server|file|mode" FIELD -> value
# FIELD: n rps rps_min rps_max us us_min us_max mbs mbs_min mbs_max upm upm_min upm_max
#        scpu ccpu errors lbr sbusy cbusy steal
bench_get() {
    awk -F'|' -v key="$2" -v f="$3" '
    $1 "|" $2 "|" $3 "|" $4 == key {
        split($6, r, ","); split($7, u, ","); split($8, m, ","); split($9, pm, ",")
        v["n"] = $5; v["rps"] = r[1]; v["rps_min"] = r[2]; v["rps_max"] = r[3]
        v["us"] = u[1]; v["us_min"] = u[2]; v["us_max"] = u[3]
        v["mbs"] = m[1]; v["mbs_min"] = m[2]; v["mbs_max"] = m[3]
        v["upm"] = pm[1]; v["upm_min"] = pm[2]; v["upm_max"] = pm[3]
        v["scpu"] = $10; v["ccpu"] = $11; v["errors"] = $12; v["lbr"] = $13
        v["sbusy"] = $14; v["cbusy"] = $15; v["steal"] = $16
        print v[f]; exit
    }' "$1"
}

# bench_cell SUMMARY KEY FIELD FMT: the median, with [min-max] when there were repetitions,
# "-" when the case did not run
bench_cell() {
    local s=$1 k=$2 field=$3 fmt=$4 n v lo hi
    n=$(bench_get "$s" "$k" n)
    [[ -z $n ]] && { echo "-"; return; }
    v=$(bench_get "$s" "$k" "$field")
    if ((n > 1)); then
        lo=$(bench_get "$s" "$k" "${field}_min")
        hi=$(bench_get "$s" "$k" "${field}_max")
        awk -v v="$v" -v lo="$lo" -v hi="$hi" -v fmt="$fmt" 'BEGIN{printf fmt " [" fmt "-" fmt "]", v, lo, hi}'
    else
        awk -v v="$v" -v fmt="$fmt" 'BEGIN{printf fmt, v}'
    fi
}

# bench_ratio A B -> A/B with two decimals, "-" if either is missing or B is 0
bench_ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}

# one line describing the machine and the tools, for report headers
bench_machine_info() {
    local cpu kern ngx wrkv rev
    cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
    kern=$(uname -r)
    ngx=$("$(bench_nginx_bin)" -v 2>&1 | sed 's/^nginx version: //')
    wrkv=$( (wrk -v 2>&1 || true) | awk 'NR == 1 {print $2}')
    rev=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
    if [[ -n $(git -C "$REPO_ROOT" status --porcelain -- crates 2>/dev/null) ]]; then rev+=" (crates modified)"; fi
    echo "host $(hostname -s), $(nproc) cores ($cpu), Linux $kern, $ngx, wrk $wrkv, hayate source $rev"
}
