#!/bin/bash
# A job survives a dead rank and loses nothing (issue 15): with --save=DIR --save_every=5 the trainer resumes
# from the newest complete DIR/step_N, and the final checkpoint of a run whose rank died at a random step is
# bitwise the final checkpoint of an uninterrupted run: every full tensor's xxh3 fingerprint (model + AdamW
# state, 45 tensors), the step, the data cursor and every rank's RNG state compare equal.
#  (a) 2 gloo processes under tessel-run --max-restarts=1; rank 1 SIGKILLs itself (kill -9) at step S;
#  (b) 4 threads-backend ranks with --max_restarts=1; rank R throws at step S; the job function is rerun;
#  (c) an incomplete save (no metadata.json: a crash before the commit) is skipped on resume;
#  (d) without restarts the fault ends the job with its error; restart flags that would be ignored are refused.
# S (and R) are random; the test prints them, and FAULT_STEP / FAULT_RANK fix them to replay a failure.
set -euo pipefail
train="$1"
launcher="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/restart"
rm -rf "$tmp" && mkdir -p "$tmp"
args=(--steps=12 --batch=4 --seq=16 --d_model=16 --layers=1 --heads=2 --lr=1e-2 --log_every=4 --save_every=5)
fail() { echo "FAIL: $*"; exit 1; }

# same_final A B: the step_12 checkpoints under A and B hold the same fingerprints, step, cursor and RNG states.
same_final() {
  /usr/bin/python3 - "$1/step_12/metadata.json" "$2/step_12/metadata.json" <<'EOF'
import json, sys
a, b = (json.load(open(p))["values"] for p in sys.argv[1:3])
fp = sorted(k for k in a if k.startswith("train.fingerprint."))
assert len(fp) == 45, f"expected 45 fingerprints (model + optimizer), got {len(fp)}"
keys = fp + ["train.step", "train.data_cursor", "train.rng_state", "train.layout", "optim.step.wte.weight"]
differ = [k for k in keys if a.get(k) != b.get(k)]
assert not differ, f"{len(differ)} entries differ, first {differ[0]}: {a.get(differ[0])} vs {b.get(differ[0])}"
assert a["train.data_cursor"]["value"] == 12, a["train.data_cursor"]
print(f"bitwise equal: {len(fp)} fingerprints, rng_state {a['train.rng_state']['value']}")
EOF
}

# (a) gloo, 2 processes.
"$launcher" --nproc-per-node 2 --master-port 0 "$train" "${args[@]}" --save="$tmp/gloo_ref" >"$tmp/ref.txt" 2>&1 \
  || { cat "$tmp/ref.txt"; fail "uninterrupted gloo run failed"; }
grep -q "fully_shard on 2 ranks (gloo backend)" "$tmp/ref.txt" || fail "the launched run did not use gloo"
step="${FAULT_STEP:-$((RANDOM % 11 + 1))}"
echo "(a) gloo: rank 1 is killed at step $step"
TESSEL_TEST_FAULT_STEP=$step "$launcher" --nproc-per-node 2 --master-port 0 --max-restarts=1 "$train" "${args[@]}" \
  --save="$tmp/gloo_kill" >"$tmp/kill.txt" 2>&1 || { cat "$tmp/kill.txt"; fail "the restarted gloo run failed"; }
cat "$tmp/kill.txt"
grep -q "\[rank 1\] train: rank 1: fault injected at step $step" "$tmp/kill.txt" || fail "no fault at step $step"
grep -q "rank 1 exited with code 137" "$tmp/kill.txt" || fail "rank 1 did not die of SIGKILL"
grep -q "attempt 0 failed with exit code 137; restarting all 2 local ranks (restart 1 of --max-restarts 1)" \
  "$tmp/kill.txt" || fail "no restart notice"
if ((step > 5)); then  # the fault hook waits for the rank's save in flight (step_5 or step_10) to commit
  grep -Eq "resume: step (5|10) from $tmp/gloo_kill/step_(5|10) \(saved on 2 ranks, loaded on 2" "$tmp/kill.txt" \
    || fail "no resume from a periodic checkpoint"
fi
same_final "$tmp/gloo_ref" "$tmp/gloo_kill" || fail "(a) the restarted gloo run ended elsewhere"

# (b) threads, 4 ranks; the in-process harness reruns the job function.
"$train" --nproc=4 "${args[@]}" --save="$tmp/threads_ref" >"$tmp/ref.txt" 2>&1 || { cat "$tmp/ref.txt"; fail "ref"; }
step="${FAULT_STEP:-$((RANDOM % 11 + 1))}"
rank="${FAULT_RANK:-$((RANDOM % 4))}"
echo "(b) threads: rank $rank throws at step $step"
TESSEL_TEST_FAULT_STEP=$step TESSEL_TEST_FAULT_RANK=$rank "$train" --nproc=4 "${args[@]}" --max_restarts=1 \
  --save="$tmp/threads_kill" >"$tmp/kill.txt" 2>&1 || { cat "$tmp/kill.txt"; fail "the restarted threads run failed"; }
cat "$tmp/kill.txt"
grep -q "restarting all 4 ranks after attempt 0 failed (restart 1 of 1): train: rank $rank: fault injected at step $step" \
  "$tmp/kill.txt" || fail "no restart notice naming the fault"
if ((step > 5)); then
  grep -Eq "resume: newest complete checkpoint under $tmp/threads_kill is $tmp/threads_kill/step_(5|10)$" \
    "$tmp/kill.txt" || fail "did not resume from a periodic checkpoint"
fi
same_final "$tmp/threads_ref" "$tmp/threads_kill" || fail "(b) the restarted threads run ended elsewhere"

# (c) step_10 lost its metadata.json (a save that crashed before its commit) and step_12 is gone: the run
# skips step_10, resumes from step_5 and still ends bitwise where the reference did.
cp -r "$tmp/threads_ref" "$tmp/partial"
rm -rf "$tmp/partial/step_12" "$tmp/partial/step_10/metadata.json"
"$train" --nproc=4 "${args[@]}" --save="$tmp/partial" >"$tmp/partial.txt" 2>&1 || { cat "$tmp/partial.txt"; fail "(c)"; }
grep -q "resume: skipping $tmp/partial/step_10: not complete" "$tmp/partial.txt" || fail "step_10 not skipped"
grep -q "resume: step 5 from $tmp/partial/step_5 (saved on 4 ranks, loaded on 4" "$tmp/partial.txt" \
  || fail "did not resume from step_5"
same_final "$tmp/threads_ref" "$tmp/partial" || fail "(c) the run resumed past a partial save ended elsewhere"

# (e) A job started from --resume=DIR that saves periodically restarts from its own newer step_10, not from
# DIR again (torchtitan uses its initial load path only while the save folder has nothing newer).
TESSEL_TEST_FAULT_STEP=11 TESSEL_TEST_FAULT_RANK=1 "$train" --nproc=4 "${args[@]}" --max_restarts=1 \
  --resume="$tmp/threads_ref/step_5" --save="$tmp/explicit" >"$tmp/explicit.txt" 2>&1 \
  || { cat "$tmp/explicit.txt"; fail "(e) the restarted run failed"; }
grep -q "resume: newest complete checkpoint under $tmp/explicit is $tmp/explicit/step_10$" "$tmp/explicit.txt" \
  || { cat "$tmp/explicit.txt"; fail "(e) the restart did not take the job's own step_10"; }
same_final "$tmp/threads_ref" "$tmp/explicit" || fail "(e) the restarted run ended elsewhere"

# (d) No --max_restarts: the injected fault is the job's error (exit 2).
if TESSEL_TEST_FAULT_STEP=3 TESSEL_TEST_FAULT_RANK=0 "$train" --nproc=2 "${args[@]}" --save=none 2>"$tmp/err.txt"; then
  fail "a fault without restarts must fail the job"
fi
grep -q "error: train: rank 0: fault injected at step 3" "$tmp/err.txt" || fail "the error does not name the fault"
# Restart flags that would be silently ignored are refused.
if "$train" --pp=2 --max_restarts=1 --steps=2 2>"$tmp/err.txt"; then fail "--pp with --max_restarts must fail"; fi
grep -q "max_restarts is not supported with --pp" "$tmp/err.txt" || fail "no --pp restart message"
if WORLD_SIZE=2 "$train" --max_restarts=1 2>"$tmp/err.txt"; then fail "--max_restarts under tessel-run must fail"; fi
grep -q "under tessel-run pass --max-restarts to the launcher instead" "$tmp/err.txt" || fail "no launcher hint"
echo PASS
