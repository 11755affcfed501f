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

# 2. Multi-node numbering: node 1 of 2 with 2 procs per node holds global ranks 2 and 3.
"$launcher" --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --master-port 1234 /bin/sh -c \
  'echo "n $RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR $MASTER_PORT"' >"$out" 2>&1 || fail "multi-node run failed"
grep -qx "\[rank 3\] n 3 4 1 1 10.1.2.3 1234" "$out" || fail "wrong multi-node variables"

# 3. Failure: rank 1 exits 7 while the others would sleep for a minute; all must be gone quickly.
start=$(date +%s)
"$launcher" --nproc-per-node 3 /bin/sh -c 'if [ "$RANK" = 1 ]; then echo dying; exit 7; fi; sleep 60' >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 7 ] || fail "expected exit 7, got $rc"
[ $elapsed -lt 10 ] || fail "took ${elapsed}s: the other ranks were not killed"
grep -q "rank 1 exited with code 7" "$out" || fail "no failure notice"
grep -qx "\[rank 1\] dying" "$out" || fail "missing output of the failed rank"

# 4. A bad flag is a usage error.
"$launcher" --bogus 1 true >"$out" 2>&1
[ $? -eq 2 ] || fail "bad flag should exit 2"
echo PASS
