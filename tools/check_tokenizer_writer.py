#!/usr/bin/env python3
"""Independent check of tokenizers written by hydra (src/tokenizer/vocab_to_tokenizer_json.*).

Loads each written directory with Hugging Face `tokenizers` (tokenizer.json alone) and
`transformers` (AutoTokenizer: tokenizer.json + tokenizer_config.json) and compares their ids with
  - the HF ids stored in tests/data/tokenizer_fixtures.json (the column named in hydra_ids.json,
    e.g. "ids" for the SmolLM2 vocabulary, "ids_gpt2" for it under the gpt2 pre-tokenizer), and
  - our own ids (hydra_ids.json: plain and with BOS/EOS), for vocabularies without HF fixtures.
It also checks that transformers sees the bos/eos/pad/unk tokens and the chat template the config
names, and renders the fixtures' chat cases the same way when the template is the fixtures'.

The directories come from the C++ tests (not from CI, which does not need Python):
    HYDRA_TOKENIZER_WRITER_OUT=/tmp/tokw ./build/hydra_tests --gtest_filter='TokenizerWriter*'
    /work/refenv/bin/python tools/check_tokenizer_writer.py /tmp/tokw/*/

Exit status 0 when every directory agrees, 1 otherwise.
"""
import argparse
import json
import os
import sys

import tokenizers
import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FIXTURES = os.path.join(HERE, "..", "tests", "data", "tokenizer_fixtures.json")


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def first_difference(a, b):
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    return k


class Report:
    def __init__(self, name):
        self.name = name
        self.failures = 0
        self.checks = 0

    def compare(self, what, got, want, text):
        self.checks += 1
        if got == want:
            return
        self.failures += 1
        if self.failures <= 10:
            k = first_difference(got, want)
            print(f"  MISMATCH {what} {text[:50]!r}: first difference at {k}, "
                  f"got {got[k:k + 4]} want {want[k:k + 4]} (lengths {len(got)} vs {len(want)})")

    def expect(self, what, ok, detail=""):
        self.checks += 1
        if not ok:
            self.failures += 1
            print(f"  FAIL {what} {detail}")


def check_dir(path, fixtures, column_override):
    rep = Report(path)
    tok_json = os.path.join(path, "tokenizer.json")
    cfg = load_json(os.path.join(path, "tokenizer_config.json"))
    ours = load_json(os.path.join(path, "hydra_ids.json")) if os.path.exists(
        os.path.join(path, "hydra_ids.json")) else None
    column = column_override or (ours or {}).get("fixture_column")

    # 1. tokenizers alone, from tokenizer.json.
    tk = tokenizers.Tokenizer.from_file(tok_json)
    n_fixture = 0
    if column:
        for e in fixtures["strings"]:
            got = tk.encode(e["text"], add_special_tokens=False).ids
            rep.compare(f"tokenizers vs fixtures[{column}]", got, e[column], e["text"])
            n_fixture += 1
    n_ours = 0
    if ours:
        for c in ours["cases"]:
            rep.compare("tokenizers vs hydra", tk.encode(c["text"], add_special_tokens=False).ids, c["ids"],
                        c["text"])
            rep.compare("tokenizers (post-processor) vs hydra encode_with_bos",
                        tk.encode(c["text"], add_special_tokens=True).ids, c["ids_with_special"], c["text"])
            n_ours += 1

    # 2. transformers, from the directory (tokenizer_config.json decides bos/eos handling).
    at = AutoTokenizer.from_pretrained(path)
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        rep.expect(f"transformers {key}", getattr(at, key) == cfg.get(key),
                   f"{getattr(at, key)!r} != {cfg.get(key)!r}")
    rep.expect("transformers chat_template", at.chat_template == cfg.get("chat_template"))
    if ours:
        for c in ours["cases"]:
            rep.compare("transformers vs hydra", at.encode(c["text"], add_special_tokens=False), c["ids"],
                        c["text"])
            rep.compare("transformers (add_special_tokens) vs hydra encode_with_bos",
                        at.encode(c["text"], add_special_tokens=True), c["ids_with_special"], c["text"])
    elif column:
        for e in fixtures["strings"]:
            rep.compare(f"transformers vs fixtures[{column}]", at.encode(e["text"], add_special_tokens=False),
                        e[column], e["text"])
    n_chat = 0
    if cfg.get("chat_template") == fixtures["chat_template"]:
        for c in fixtures["chat"]:
            text = at.apply_chat_template(c["messages"], tokenize=False,
                                          add_generation_prompt=c["add_generation_prompt"])
            rep.expect("transformers chat rendering", text == c["text"], repr(text[:80]))
            n_chat += 1

    status = "OK" if rep.failures == 0 else f"FAILED ({rep.failures} of {rep.checks} checks)"
    print(f"{path}: {status}: {n_fixture} fixture strings vs {column or '-'}, {n_ours} strings vs hydra "
          f"(plain and with BOS/EOS, tokenizers and transformers), {n_chat} chat renderings")
    return rep.failures == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="directories with tokenizer.json + tokenizer_config.json")
    ap.add_argument("--fixtures", default=DEFAULT_FIXTURES)
    ap.add_argument("--column", help="fixture column to compare with (default: from hydra_ids.json)")
    args = ap.parse_args()
    print(f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}")
    fixtures = load_json(args.fixtures)
    ok = all([check_dir(d.rstrip("/"), fixtures, args.column) for d in args.dirs])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
