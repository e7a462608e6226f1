#!/usr/bin/env python3
"""kill -9 during `hydra train --preset tiny-cpu`, then resume, many times; the final checkpoint must
be bit-identical to an uninterrupted run's.

Runs the reference training once, then the same training into another directory while killing it
(SIGKILL) at random moments (a random step ahead, plus a random fraction of a step's time, so
kills land before, inside and after saves), each time restarting it (`--resume` once a checkpoint exists, the
original command before that), until --kills kills have landed; the last run finishes. Small
enough for a 2-core machine: the tiny-cpu model on short rows and batches, a save every 2 steps
(so many kills land inside a save: between its writes, fsyncs and renames).

When the run reaches its last step before all kills have landed, it is compared with the
reference and started again from nothing (another round). Prints the figures: kills, rounds,
how many kills landed during a save (a .tmp-/.old- sibling or a held-over
lock file was left), recoveries reported by hydra, restarts, and the sha256 of each compared file.
Exit status 0 when every compared file matches, 1 otherwise.

  tools/kill9_resume.py [--hydra build/hydra] [--kills 24] [--steps 40] [--seed 1] [--work DIR]
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

COMPARED = ["model.safetensors", "optim.safetensors", "state.json", "config.json"]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def saved_step(run):
    try:
        with open(os.path.join(run, "state.json")) as f:
            return json.load(f)["step"]
    except (OSError, ValueError, KeyError):
        return -1


def log_lines(run):
    try:
        with open(os.path.join(run, "log.jsonl"), "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--hydra", default=os.path.join(root, "build", "hydra"))
    ap.add_argument("--kills", type=int, default=24)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save-every", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="", help="working directory (default: a fresh temporary one, removed)")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    work = a.work or tempfile.mkdtemp(prefix="hydra_kill9_")
    os.makedirs(work, exist_ok=True)
    # Shards in the work directory: the shared prose cache is only read. One thread: bit-exactness
    # holds per thread count, and the machine may be shared.
    overrides = [f"run.steps={a.steps}", f"run.save_every={a.save_every}", "run.eval_every=1000",
                 "run.threads=1", "data.seq_len=64", "data.batch_size=2",
                 f"data.shard_dir={os.path.join(work, 'shards')}"]
    base = [a.hydra, "train", "--preset", "tiny-cpu"] + overrides

    t0 = time.time()
    ref = os.path.join(work, "ref")
    subprocess.run(base + ["--out", ref], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_ref = time.time() - t0
    step_time = t_ref / a.steps
    print(f"reference run: {a.steps} steps in {t_ref:.1f} s")

    run = os.path.join(work, "run")
    parent = os.path.dirname(run)
    kills = during_save = lock_left = restarts = recovered = 0
    steps_at_kill = []  # the checkpointed step after each kill
    rounds, round_ok = 0, []
    log = open(os.path.join(work, "stderr.log"), "wb")
    while True:
        # A checkpoint exists in the run directory or in a copy a cut save left beside it (which
        # --resume recovers); a copy beside it counts once its manifest (written last) is there.
        resume = os.path.exists(os.path.join(run, "state.json")) or any(
            os.path.exists(os.path.join(parent, n, "hydra_manifest.json")) for n in os.listdir(parent)
            if n.startswith("run.tmp-") or n.startswith("run.old-"))
        cmd = ([a.hydra, "train", "--resume", run, "--steps", str(a.steps)] if resume else base + ["--out", run])
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        restarts += 1
        if kills < a.kills:
            # Kill at a random moment around a random step ahead: wait until the live log reaches it,
            # then up to one step's time more (a save follows every save_every-th step's line), so
            # kills land before, inside and after saves, not only during start-up.
            ck = saved_step(run) if resume else 0
            target = ck + rng.randint(1, 2 * a.save_every)
            while p.poll() is None and log_lines(run) < target:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 1.2 * step_time))
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                kills += 1
                left = [n for n in os.listdir(parent) if n.startswith("run.tmp-") or n.startswith("run.old-")]
                during_save += bool(left)
                steps_at_kill.append(saved_step(run) if os.path.exists(os.path.join(run, "state.json")) else 0)
                lock_left += os.path.exists(run + ".lock")
                continue
        rc = p.wait()
        if rc != 0:
            log.flush()
            print(f"hydra exited with {rc} after {kills} kills; see {os.path.join(work, 'stderr.log')}")
            return 1
        # The run finished: compare it with the reference; start another round while kills remain.
        rounds += 1
        leftovers = sorted(n for n in os.listdir(parent) if n.startswith("run.") and n != "run")
        same = {name: sha(os.path.join(ref, name)) == sha(os.path.join(run, name)) for name in COMPARED}
        round_ok.append(all(same.values()) and not leftovers)
        print(f"round {rounds}: finished after {kills} kills in all; files "
              f"{'identical' if all(same.values()) else 'DIFFERENT: ' + str(same)}; leftovers: {leftovers or 'none'}")
        if kills >= a.kills:
            break
        shutil.rmtree(run)
    log.close()
    with open(os.path.join(work, "stderr.log"), "rb") as f:
        recovered = f.read().count(b"recovered the newest complete copy")
    ok = all(round_ok)
    print(f"kills: {kills} (kill -9 at a random step 1..{2 * a.save_every} past the checkpoint, plus 0..1.2 step "
          f"times); restarts: {restarts}; rounds (runs to the last step): {rounds}")
    print(f"kills that left a cut save (.tmp-/.old- sibling): {during_save}; recoveries reported: {recovered}; "
          f"kills that left the lock file (taken over): {lock_left}")
    print(f"checkpointed step after each kill: {' '.join(map(str, steps_at_kill))}")
    for name in COMPARED:
        print(f"{name:20s} {sha(os.path.join(ref, name))[:16]} (reference)  {sha(os.path.join(run, name))[:16]} (last round)")
    print(f"total {time.time() - t0:.1f} s; {'PASS' if ok else 'FAIL'}")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
