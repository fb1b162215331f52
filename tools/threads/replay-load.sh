#!/usr/bin/env bash
# replay-load.sh CTXD LABEL LOAD [ctxd flags...]: times one hot-set replay
# (ctxctl replay) against a fresh ctxd while LOAD runs beside it; the
# README table "CPU threads beside a busy machine" comes from it.
# LOAD: idle | busy1 (one busy loop) | nice2 (two nice-19 busy loops)
set -u
ctxd=$1 label=$2 load=$3; shift 3
D=$(mktemp -d)
M=${CTXD_MODEL:-../shared/models/stories260K.gguf} T=${TRACE:-../shared/traces/marshmallow-1867-default.traj}
$ctxd --model $M --hot 512 --ctx 512 --socket $D/s.sock --data-dir $D/data --no-cold --log-level warn "$@" 2>$D/ctxd.log &
cp=$!
for i in $(seq 100); do [ -S $D/s.sock ] && break; sleep 0.1; done
pids=()
case $load in
busy1) sh -c 'while :; do :; done' & pids+=($!) ;;
nice2) nice -n 19 sh -c 'while :; do :; done' & pids+=($!); nice -n 19 sh -c 'while :; do :; done' & pids+=($!) ;;
esac
la=$(cut -d' ' -f1-4 /proc/loadavg)
t0=$(date +%s.%N)
${CTXCTL:-bin/ctxctl} --socket $D/s.sock --no-progress replay --trace $T >$D/replay.txt 2>&1
rc=$?
t1=$(date +%s.%N)
for p in "${pids[@]}"; do kill $p; done
kill $cp; wait $cp 2>/dev/null
printf "%-28s %-6s %6.1f s  rc=%d  loadavg-before %s\n" "$label" "$load" "$(echo "$t1 - $t0" | bc)" $rc "$la"
rm -rf $D
