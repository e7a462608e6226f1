#!/usr/bin/env python3
"""Reference values for linear CKA (tests/data/cka_reference.json), computed once with numpy.

The reference takes the other route to the same quantity than src/interp/linear_cka.cpp: n x n Gram
matrices K = X X^T with Kornblith et al.'s centering (the biased H K H, or the unbiased centering of
Song et al. 2012 with the diagonal removed), in float64, from Kornblith's published reference code
(google-research/google-research, representation_similarity/Demo.ipynb). The C++ side accumulates
feature moments over batches and never forms a Gram matrix, so agreement checks the algebra too.

The inputs are written into the JSON (float32-exact values), so the test feeds the C++ side the very
numbers numpy saw. Run: python3 tools/make_cka_reference.py  (numpy only).
"""
import json
import os

import numpy as np


def center_gram(gram, unbiased):
    gram = gram.copy()
    if unbiased:
        n = gram.shape[0]
        np.fill_diagonal(gram, 0)
        means = np.sum(gram, 0, dtype=np.float64) / (n - 2)
        means -= np.sum(means) / (2 * (n - 1))
        gram -= means[:, None]
        gram -= means[None, :]
        np.fill_diagonal(gram, 0)
    else:
        means = np.mean(gram, 0, dtype=np.float64)
        means -= np.mean(means) / 2
        gram -= means[:, None]
        gram -= means[None, :]
    return gram


def cka(x, y, debiased):
    gx = center_gram(x @ x.T, debiased)
    gy = center_gram(y @ y.T, debiased)
    return float(gx.ravel().dot(gy.ravel()) / (np.linalg.norm(gx) * np.linalg.norm(gy)))


def f32(a):
    # float32-representable values, held as float64 for the reference itself
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def main():
    rng = np.random.default_rng(20190508)
    cases = []
    # Related representations of different widths, with a large common offset (like a residual stream's
    # mean) that the centering must remove.
    n, dx, dy = 64, 12, 7
    x = f32(rng.normal(size=(n, dx)) * rng.uniform(0.2, 3.0, size=dx) + 40.0)
    w = rng.normal(size=(dx, dy))
    y = f32((x - 40.0) @ w + 2.0 * rng.normal(size=(n, dy)) - 15.0)
    cases.append(("related", x, y))
    # Independent draws: CKA near 0 for the debiased estimator, clearly above 0 for the biased one
    # (its bias is of order d / n).
    n, dx, dy = 40, 10, 10
    cases.append(("independent", f32(rng.normal(size=(n, dx))), f32(rng.normal(size=(n, dy)))))
    # Few examples, one outlier row (as an attention-sink position would be).
    n, dx, dy = 9, 5, 6
    x = rng.normal(size=(n, dx))
    x[0] *= 30.0
    y = np.tanh(x @ rng.normal(size=(dx, dy)))
    cases.append(("outlier", f32(x), f32(y)))

    out = {"generator": "tools/make_cka_reference.py", "numpy": np.__version__, "cases": []}
    for name, x, y in cases:
        out["cases"].append({
            "name": name,
            "n": int(x.shape[0]),
            "dx": int(x.shape[1]),
            "dy": int(y.shape[1]),
            "x": [float(v) for v in x.ravel()],
            "y": [float(v) for v in y.ravel()],
            "cka_biased": cka(x, y, False),
            "cka_debiased": cka(x, y, True),
        })
        print(f"{name}: biased {out['cases'][-1]['cka_biased']:.6f} debiased {out['cases'][-1]['cka_debiased']:.6f}")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "cka_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
