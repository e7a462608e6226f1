#!/usr/bin/env python3
"""Reference numbers for tests of src/eval/bootstrap (run once; output committed as
tests/data/bootstrap_reference.json). numpy.percentile (linear interpolation) on fixed inputs, and
percentile-bootstrap intervals computed with numpy's own generator and many resamples, so the C++
bootstrap (a different generator) must agree within Monte Carlo error."""
import json
import numpy as np

rng = np.random.default_rng(20261203)
out = {"percentile": [], "mean": [], "ratio": []}

for values in ([3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], list(rng.normal(size=17).round(6))):
    s = sorted(values)
    qs = [0.0, 2.5, 25.0, 50.0, 73.3, 97.5, 100.0]
    out["percentile"].append({"sorted": s, "q": qs, "expected": [float(np.percentile(s, q)) for q in qs]})

B = 200000
def boot_mean(x):
    x = np.asarray(x, dtype=np.float64)
    idx = rng.integers(0, len(x), size=(B, len(x)))
    m = x[idx].mean(axis=1)
    return float(np.percentile(m, 2.5)), float(np.percentile(m, 97.5))

def boot_ratio(num, den):
    num = np.asarray(num, dtype=np.float64); den = np.asarray(den, dtype=np.float64)
    idx = rng.integers(0, len(num), size=(B, len(num)))
    r = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))

# RULER-like 0/1 scores: 50 samples, 30 correct; and partial scores (string_match_all fractions).
cases = [[1.0] * 30 + [0.0] * 20,
         list(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=60)),
         list(rng.exponential(2.0, size=40).round(6))]
for x in cases:
    x = [float(v) for v in x]
    lo, hi = boot_mean(x)
    sd = float(np.std(x)) / np.sqrt(len(x))  # the plug-in standard error the bootstrap estimates
    out["mean"].append({"values": x, "lo": lo, "hi": hi, "mean": float(np.mean(x)), "se": sd})

# Per-token metric over windows: window token counts and summed NLL.
den = [float(v) for v in rng.integers(50, 200, size=30)]
num = [float(round(d * (2.0 + 0.5 * rng.normal()), 6)) for d in den]
lo, hi = boot_ratio(num, den)
out["ratio"].append({"num": num, "den": den, "lo": lo, "hi": hi, "ratio": sum(num) / sum(den)})

with open("tests/data/bootstrap_reference.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
