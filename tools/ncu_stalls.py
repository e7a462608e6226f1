#!/usr/bin/env python3
"""Summarise Nsight Compute's per-instruction warp-stall sampling of one kernel.

Input: the CSV that `ncu --import REPORT --page source --csv --print-source sass > FILE` writes (plain or
gzip-compressed), for a report collected with `--section SourceCounters`. Output: the stall reasons over
the whole kernel, the share of samples by opcode, the kernel's SASS cut into fixed blocks of lines with
their share of samples and the notable opcodes in each (so a copy loop, a GEMM or a barrier wait stands
out), and the instructions holding the most samples.

    tools/ncu_stalls.py docs/results/gdn_scan_warps/callAC_scan16x8_sass.csv.gz --block 100
"""
import argparse
import collections
import csv
import gzip
import io
import signal
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
REASONS = ["stall_barrier", "stall_branch_resolving", "stall_dispatch", "stall_lg", "stall_long_sb",
           "stall_math", "stall_mio", "stall_no_inst", "stall_not_selected", "stall_selected",
           "stall_short_sb", "stall_wait"]
NOTABLE = ["LDGSTS", "HMMA", "LDSM", "BAR", "MUFU", "STS", "LDS", "STG", "LDG"]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as f:
            rows = list(csv.reader(io.StringIO(f.read())))
    except OSError as e:
        sys.exit(f"ncu_stalls: cannot read {path}: {e}")
    # line 1 names the kernel, line 2 holds the column names
    if len(rows) < 3 or "Source" not in rows[1] or SAMPLES not in rows[1]:
        sys.exit(f"ncu_stalls: {path} is not an ncu source-page CSV with stall sampling (expected the kernel "
                 f"name on line 1 and columns 'Source' and '{SAMPLES}' on line 2; collect with "
                 "--section SourceCounters and export with --page source --csv --print-source sass)")
    return rows[0], rows[1], rows[2:]


def opcode(source):
    words = [w for w in source.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu source-page CSV (.csv or .csv.gz)")
    ap.add_argument("--block", type=int, default=100, help="SASS lines per block (default 100)")
    ap.add_argument("--top", type=int, default=15, help="instructions with the most samples to list")
    ap.add_argument("--min-share", type=float, default=0.005, help="hide blocks under this share")
    args = ap.parse_args()
    if args.block < 1 or args.top < 0:
        sys.exit("ncu_stalls: --block must be >= 1 and --top >= 0")
    title, header, rows = read_rows(args.csv)
    col = {name: i for i, name in enumerate(header)}
    reasons = [r for r in REASONS if r in col]
    samples = [number(r[col[SAMPLES]]) for r in rows]
    total = sum(samples)
    if total <= 0:
        sys.exit(f"ncu_stalls: {args.csv} holds no stall samples")
    print(" ".join(title).strip(", "))
    print(f"{len(rows)} SASS lines, {total:.0f} samples")
    by_reason = {r: sum(number(row[col[r]]) for row in rows) / total for r in reasons}
    print("stall reasons: " + ", ".join(f"{r[6:]} {v:.3f}" for r, v in
                                         sorted(by_reason.items(), key=lambda kv: -kv[1]) if v >= 0.001))
    by_op = collections.Counter()
    for row, s in zip(rows, samples):
        by_op[opcode(row[col["Source"]])] += s
    print("samples by opcode: " + ", ".join(f"{op} {v / total:.3f}" for op, v in by_op.most_common(12)))
    print(f"\nblocks of {args.block} lines (share of samples, instructions executed, notable opcodes):")
    executed = col.get("Instructions Executed")
    for start in range(0, len(rows), args.block):
        part = rows[start:start + args.block]
        share = sum(samples[start:start + args.block]) / total
        if share < args.min_share:
            continue
        ops = collections.Counter(opcode(r[col["Source"]]) for r in part)
        inst = sum(number(r[executed]) for r in part) if executed is not None else 0.0
        notable = " ".join(f"{op} {ops[op]}" for op in NOTABLE if ops[op])
        print(f"  {start:5d}-{start + len(part) - 1:5d}  {share:6.3f}  {inst:12.0f}  {notable}")
    print(f"\ninstructions with the most samples (line, share, main reason, source):")
    for i in sorted(sorted(range(len(rows)), key=lambda i: -samples[i])[:args.top]):
        main_reason = max(reasons, key=lambda r: number(rows[i][col[r]])) if reasons else ""
        print(f"  {i:5d}  {samples[i] / total:6.3f}  {main_reason[6:]:16s} {rows[i][col['Source']].strip()[:72]}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    main()
