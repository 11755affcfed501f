#!/bin/bash
# tessel-run sets torchrun's variables, prefixes each rank's lines, and when one rank fails it kills
# the others and exits with that rank's code.
set -u
launcher="$1"
out="${TEST_TMPDIR:-/tmp}/launcher_out.txt"
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$out"; exit 1; }

# 1. Success: every rank sees its variables; stdout and stderr are both prefixed.
"$launcher" --nproc-per-node 3 --master-port 0 -- /bin/sh -c \
  'echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR"; echo "err $RANK" >&2; printf "no newline $RANK"' \
  >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "expected exit 0, got $rc"
for r in 0 1 2; do
  grep -qx "\[rank $r\] env $r 3 $r 3 127.0.0.1" "$out" || fail "missing env line of rank $r"
  grep -qx "\[rank $r\] err $r" "$out" || fail "missing stderr line of rank $r"
  grep -qx "\[rank $r\] no newline $r" "$out" || fail "missing unterminated line of rank $r"
done

# 2. Multi-node numbering: node 1 of 2 with 2 procs per node holds global ranks 2 and 3. A node > 0 first
# waits for something to listen at the master address: a stand-in for node 0's store.
portfile="${TEST_TMPDIR:-/tmp}/listener_port"
rm -f "$portfile"
/usr/bin/python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(16)
open(sys.argv[1],"w").write(str(s.getsockname()[1])); time.sleep(60)' "$portfile" &
listener=$!
for _ in $(seq 100); do [ -s "$portfile" ] && break; sleep 0.1; done
port=$(cat "$portfile")
"$launcher" --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" /bin/sh -c \
  'echo "n $RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR $MASTER_PORT $GROUP_WORLD_SIZE $ROLE_NAME $ROLE_RANK \
$ROLE_WORLD_SIZE $TORCHELASTIC_RUN_ID $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS"' >"$out" 2>&1 ||
  fail "multi-node run failed"
kill "$listener" 2>/dev/null
grep -qx "\[rank 3\] n 3 4 1 1 127.0.0.1 $port 2 default 3 4 none 0 0" "$out" || fail "wrong multi-node variables"
grep -q "waiting for the rendezvous at 127.0.0.1:$port" "$out" || fail "no waiting notice"
# torchrun's rendezvous flags (the elastic DDP tutorial's command line): endpoint -> master address / port, id ->
# TORCHELASTIC_RUN_ID
"$launcher" --nproc-per-node 2 --rdzv_id=100 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29461 /bin/sh -c \
  'echo "r $RANK $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID"' >"$out" 2>&1 || fail "rdzv flags refused"
grep -qx "\[rank 1\] r 1 127.0.0.1 29461 100" "$out" || fail "rdzv flags not applied"

# 3. Failure: rank 1 exits 7 while the others would sleep for a minute; all must be gone quickly.
start=$(date +%s)
"$launcher" --nproc-per-node 3 /bin/sh -c 'if [ "$RANK" = 1 ]; then echo dying; exit 7; fi; sleep 60' >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 7 ] || fail "expected exit 7, got $rc"
[ $elapsed -lt 10 ] || fail "took ${elapsed}s: the other ranks were not killed"
grep -q "rank 1 exited with code 7" "$out" || fail "no failure notice"
grep -qx "\[rank 1\] dying" "$out" || fail "missing output of the failed rank"

# 3a. By default (torchrun's) a rank that exits 0 early leaves the others to finish: rank 0's later work (a
# checkpoint after the others are done) completes and the job exits 0.
"$launcher" --nproc-per-node 2 /bin/sh -c 'if [ "$RANK" = 0 ]; then sleep 3; echo "rank 0 late work done"; fi' \
  >"$out" 2>&1 || fail "an early clean exit ended the job (rc $?)"
grep -qx "\[rank 0\] rank 0 late work done" "$out" || fail "rank 0's late work was cut off"

# 3a'. A Python script runs under python (torchrun's), with the script's arguments.
pyscript="${TEST_TMPDIR:-/tmp}/tessel_run_script.py"
printf 'import os, sys\nprint("py", os.environ["RANK"], sys.argv[1:])\n' >"$pyscript"
"$launcher" --nproc-per-node 2 "$pyscript" --flag x >"$out" 2>&1 || fail "a .py script did not run (rc $?)"
grep -qx "\[rank 1\] py 1 \['--flag', 'x'\]" "$out" || fail "the .py script's output is missing"

# 3a''. torchrun's command lines: --standalone, --nproc_per_node cpu, --nnodes 1:1, -m (a module), --role,
# --monitor_interval; --no-python runs a *.py as a program; an elastic --nnodes range is refused.
pydir="${TEST_TMPDIR:-/tmp}/tessel_run_mod"
mkdir -p "$pydir" && printf 'import os\nprint("mod", os.environ["RANK"], os.environ["ROLE_NAME"])\n' >"$pydir/tr_mod.py"
PYTHONPATH="$pydir" "$launcher" --standalone --nnodes 1:1 --nproc_per_node 2 --role trainer --monitor_interval 1 \
  -m tr_mod >"$out" 2>&1 || fail "torchrun flags refused (rc $?)"
grep -qx "\[rank 1\] mod 1 trainer" "$out" || fail "-m tr_mod did not run as rank 1 with its role"
"$launcher" --nproc_per_node cpu /bin/sh -c 'echo "n=$WORLD_SIZE"' >"$out" 2>&1 || fail "--nproc_per_node cpu refused"
grep -q "\[rank 0\] n=$(nproc)" "$out" || fail "--nproc_per_node cpu is not the CPU count"
"$launcher" --no-python --nproc-per-node 1 "$pyscript" >"$out" 2>&1
[ $? -eq 127 ] || fail "--no-python ran the .py under python"
"$launcher" --nnodes 1:2 --nproc-per-node 1 /bin/true >"$out" 2>&1
[ $? -eq 2 ] && grep -q "elastic node ranges are not supported" "$out" ||
  fail "an elastic --nnodes range was not refused"

# 3b. With --exit-grace-s G, a rank that exits 0 while the others still run ends the job after the grace,
# with exit 1; ranks finishing together (case 1) are unaffected.
start=$(date +%s)
"$launcher" --nproc-per-node 3 --exit-grace-s 1 /bin/sh -c 'if [ "$RANK" = 2 ]; then exit 0; fi; sleep 60' >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 1 ] || fail "expected exit 1 after an early clean exit, got $rc"
[ $elapsed -lt 30 ] || fail "took ${elapsed}s: the job was not ended after rank 2 left"
grep -q "rank 2 exited with code 0 but rank(s) 0, 1 still run 1 s later" "$out" || fail "no early-exit notice"

# 3d. Error files: rank 1 writes torch's JSON to its TORCHELASTIC_ERROR_FILE and fails first: its message and
# callstack are printed as the root cause; a failing rank without a file gets the hint. The directory goes away.
errdir="${TEST_TMPDIR:-/tmp}/errfiles"
rm -rf "$errdir" && mkdir -p "$errdir"
TMPDIR="$errdir" "$launcher" --nproc-per-node 2 /bin/sh -c 'if [ "$RANK" = 1 ]; then
  printf "%s" "{\"message\": {\"message\": \"ValueError: boom\", \"extraInfo\": {\"py_callstack\": \"line one\\nline two\", \"timestamp\": \"1\"}}}" > "$TORCHELASTIC_ERROR_FILE"; exit 3; fi; sleep 60' >"$out" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "expected exit 3 from the recorded failure, got $rc"
grep -qx "\[tessel-run\] root cause (first observed failure): rank 1 (local_rank 1), exit code 3" "$out" || fail "no root cause"
grep -qx "\[tessel-run\]   ValueError: boom" "$out" || fail "no recorded message"
grep -qx "\[tessel-run\]   line two" "$out" || fail "no recorded callstack"
[ -z "$(ls -A "$errdir")" ] || fail "error files left in $errdir: $(ls -A "$errdir")"
"$launcher" --nproc-per-node 1 /bin/sh -c 'exit 4' >"$out" 2>&1
grep -q "root cause (first observed failure): rank 0 (local_rank 0), exit code 4" "$out" || fail "no root cause line"
grep -q "no error file: decorate the entry point with torch.distributed.elastic.multiprocessing.errors.record" "$out" \
  || fail "no hint for a rank without an error file"

# 3c. Node 1 with no node 0: it says where it waits and gives up (exit 3) at the stated deadline.
start=$(date +%s)
"$launcher" --nproc-per-node 1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 1 \
  --rendezvous-timeout-s 1 /bin/true >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 3 ] || fail "expected exit 3 with no node 0, got $rc"
[ $elapsed -lt 30 ] || fail "took ${elapsed}s to give up"
grep -q "waiting for the rendezvous at 127.0.0.1:1 (rank 0 on node 0) until .* (1 s, --rendezvous-timeout-s)" "$out" \
  || fail "no waiting notice with its deadline"
grep -q "gave up after 1 s: nothing accepted a connection at 127.0.0.1:1" "$out" || fail "no give-up notice"

# 4. A bad flag is a usage error (absl flags; torchrun's '-' spelling and absl's '_' both work).
"$launcher" --bogus 1 true >"$out" 2>&1
[ $? -eq 2 ] || fail "bad flag should exit 2"
grep -q "unknown flag --bogus" "$out" || fail "no unknown-flag message"
"$launcher" --help >"$out" 2>&1
grep -q -- "--max_restarts (restart all local ranks up to N times" "$out" || fail "--help does not list --max_restarts"
"$launcher" --nproc_per_node=2 --max-restarts 0 /bin/sh -c 'echo "u $WORLD_SIZE"' >"$out" 2>&1 || fail "'_' spelling failed"
grep -qx "\[rank 1\] u 2" "$out" || fail "--nproc_per_node=2 not honoured"
"$launcher" --nproc-per-node 1 --max-restarts=-1 true >"$out" 2>&1
[ $? -eq 2 ] || fail "a negative --max-restarts should exit 2"
"$launcher" --nproc-per-node 1 --nnodes 2 --max-restarts 1 true >"$out" 2>&1
[ $? -eq 2 ] || fail "--max-restarts with --nnodes 2 should exit 2"
grep -q "max-restarts needs --nnodes 1" "$out" || fail "no multi-node restart message"

# 4b. --max-restarts: rank 1 fails in attempts 0 and 1 (TESSEL_RESTART_COUNT) while rank 0 sleeps; the launcher
# stops rank 0, restarts both, and the third attempt succeeds. Each restart is printed. Rank 1 fails only once
# rank 0 has printed its attempt (a marker file, waited for up to 10 s): else a slow start of rank 0 (a
# sanitizer build, a loaded machine) is stopped before it prints, and the count below reads 2.
mark=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mark.XXXXXX")
prog='echo "attempt $TESSEL_RESTART_COUNT"; [ "$RANK" = 0 ] && touch "$MARK/$TESSEL_RESTART_COUNT"
if [ "$RANK" = 1 ] && [ "$TESSEL_RESTART_COUNT" -lt 2 ]; then
  i=0; while [ ! -e "$MARK/$TESSEL_RESTART_COUNT" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done; exit 5
fi
[ "$RANK" = 0 ] && [ "$TESSEL_RESTART_COUNT" -lt 2 ] && sleep 60; exit 0'
start=$(date +%s)
MARK="$mark" "$launcher" --nproc-per-node 2 --max-restarts 2 /bin/sh -c "$prog" >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 0 ] || fail "expected exit 0 after two restarts, got $rc"
[ $elapsed -lt 30 ] || fail "took ${elapsed}s: rank 0 was not stopped before a restart"
for a in 0 1; do
  grep -q "attempt $a failed with exit code 5; restarting all 2 local ranks (restart $((a + 1)) of --max-restarts 2)" \
    "$out" || fail "no restart notice after attempt $a"
done
[ "$(grep -c "^\[rank 0\] attempt [012]$" "$out")" -eq 3 ] || fail "rank 0 did not run three attempts"
# Out of restarts: the exit code of the last attempt (here attempt 1 fails with 5 again).
mark=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mark.XXXXXX")
MARK="$mark" "$launcher" --nproc-per-node 2 --max-restarts 1 /bin/sh -c "$prog" >"$out" 2>&1
rc=$?
[ $rc -eq 5 ] || fail "expected the last attempt's exit code 5, got $rc"
[ "$(grep -c "restarting all 2 local ranks" "$out")" -eq 1 ] || fail "expected exactly one restart"
# 5. Backend choice (comm/backend_choice.h): gloo without GPUs, nccl with a GPU per process, exported
#    to every rank as TESSEL_BACKEND; --backend=nccl without enough GPUs is a usage error.
dev="${TEST_TMPDIR:-/tmp}/fake_dev"; mkdir -p "$dev"; : > "$dev/nvidia0"; : > "$dev/nvidia1"; : > "$dev/nvidiactl"
nodev="${TEST_TMPDIR:-/tmp}/no_gpu_dev"; mkdir -p "$nodev"
TESSEL_DEV_DIR="$nodev" "$launcher" --nproc-per-node 2 /bin/sh -c 'echo "b $TESSEL_BACKEND"' >"$out" 2>&1 \
  || fail "auto backend run failed"
grep -qx "\[rank 1\] b gloo" "$out" || fail "auto without GPUs should be gloo"
TESSEL_DEV_DIR="$dev" "$launcher" --nproc-per-node 2 /bin/sh -c 'echo "b $TESSEL_BACKEND"' >"$out" 2>&1 \
  || fail "auto backend run with GPUs failed"
grep -qx "\[rank 0\] b nccl" "$out" || fail "auto with 2 GPUs for 2 processes should be nccl"
TESSEL_DEV_DIR="$dev" CUDA_VISIBLE_DEVICES=1 "$launcher" --nproc-per-node 2 --backend gloo /bin/sh -c \
  'echo "b $TESSEL_BACKEND"' >"$out" 2>&1 || fail "explicit gloo run failed"
grep -qx "\[rank 1\] b gloo" "$out" || fail "--backend gloo not exported"
TESSEL_DEV_DIR="$dev" CUDA_VISIBLE_DEVICES=1 "$launcher" --nproc-per-node 2 --backend=nccl true >"$out" 2>&1
[ $? -eq 2 ] || fail "--backend=nccl with 1 visible GPU for 2 processes should exit 2"
grep -q "2 processes per node need one GPU each, but 1 are visible" "$out" || fail "no GPU-count message"
"$launcher" --nproc-per-node 1 --backend mpi true >"$out" 2>&1
[ $? -eq 2 ] || fail "unknown backend should exit 2"
grep -q "unknown backend 'mpi'" "$out" || fail "no unknown-backend message"
# 6. torchrun's log flags. --tee 3 with --local-ranks-filter 0: every rank's streams in
#    <log-dir>/<run id>/attempt_0/<local rank>/{stdout,stderr}.log (unprefixed), rank 0's also on the console with
#    torchrun's "[default0]:" prefix, rank 1's not at all.
logs="${TEST_TMPDIR:-/tmp}/tessel_run_logs"; rm -rf "$logs"
"$launcher" --nproc-per-node 2 --log-dir "$logs" --rdzv-id job7 --tee 3 --local-ranks-filter 0 /bin/sh -c \
  'echo "out $RANK"; echo "err $RANK" >&2; printf "tail $RANK"' >"$out" 2>&1 || fail "--tee run failed"
for r in 0 1; do
  [ "$(cat "$logs/job7/attempt_0/$r/stdout.log")" = "$(printf "out $r\ntail $r")" ] || fail "stdout.log of rank $r"
  [ "$(cat "$logs/job7/attempt_0/$r/stderr.log")" = "err $r" ] || fail "stderr.log of rank $r"
done
grep -qx "\[default0\]:out 0" "$out" || fail "rank 0's teed stdout line"
grep -qx "\[default0\]:err 0" "$out" || fail "rank 0's teed stderr line"
grep -qx "\[default0\]:tail 0" "$out" || fail "rank 0's unterminated teed line"
! grep -q "out 1\|err 1" "$out" || fail "--local-ranks-filter 0 let rank 1's lines through"
[ "$(wc -l <"$out")" -eq 3 ] || fail "expected only rank 0's three teed lines"
# -r 0:1 (short flag, per local rank): rank 0's stdout only to the file, in a temporary log directory that the
# launcher names; its stderr and rank 1's streams stay on the console with the [rank r] prefix. A template names
# the teed lines' prefix.
"$launcher" --nproc-per-node 2 -r 0:1 /bin/sh -c 'echo "out $RANK"; echo "err $RANK" >&2' >"$out" 2>&1 ||
  fail "-r run failed"
dir=$(sed -n 's/^\[tessel-run\] log directory: //p' "$out")
[ -n "$dir" ] && [ "$(cat "$dir"/*/attempt_0/0/stdout.log)" = "out 0" ] || fail "no temporary log directory"
[ ! -e "$(echo "$dir"/*/attempt_0/0/stderr.log)" ] || fail "rank 0's stderr was not redirected, yet has a file"
! grep -q "out 0" "$out" || fail "a redirected line reached the console"
grep -qx "\[rank 0\] err 0" "$out" && grep -qx "\[rank 1\] out 1" "$out" || fail "unredirected lines lost"
rm -rf "$dir"
"$launcher" --nproc-per-node 2 --log-dir "$logs" -t 1 --role trainer \
  --log-line-prefix-template '<${rank}|${role_name}|${local_rank}>' /bin/sh -c 'echo "o $RANK"' >"$out" 2>&1 ||
  fail "template run failed"
grep -qx "<1|trainer|1>o 1" "$out" || fail "--log-line-prefix-template not applied"
"$launcher" --nproc-per-node 2 --redirects 5 true >"$out" 2>&1
[ $? -eq 2 ] && grep -q "\-\-redirects 5: expected 0-3" "$out" || fail "--redirects 5 should be a usage error"
"$launcher" --nproc-per-node 2 --local-ranks-filter a true >"$out" 2>&1
[ $? -eq 2 ] && grep -q "comma-separated list of integers" "$out" || fail "a bad filter should be a usage error"
echo PASS
