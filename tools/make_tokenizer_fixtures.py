#!/usr/bin/env python3
"""Reference fixtures for HydraHead's byte-level BPE tokenizer (tests/test_tokenizer.cpp).

Run with the reference venv:
    /work/refenv/bin/python tools/make_tokenizer_fixtures.py [--gguf PATH] [--out tests/data]

The tokenizer is loaded independently of our C++ code, by Hugging Face transformers from the same
GGUF (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`, i.e. HF's own GGUF -> tokenizer
conversion). That conversion knows no "smollm" pre-tokenizer and falls back to a plain ByteLevel
(the `gpt2` regex); the `ids_gpt2` column records exactly what it produces. The real SmolLM2
tokenizer.json uses Sequence[Digits(individual_digits=true), ByteLevel], which is what the GGUF's
`tokenizer.ggml.pre = "smollm"` means (llama.cpp), so the `ids` column is produced by the same HF
tokenizer with that pre-tokenizer set through the `tokenizers` API. That tokenizer is also saved
as tests/data/smollm2_tokenizer/{tokenizer.json,tokenizer_config.json} for our tokenizer.json loader.

Outputs:
  tests/data/tokenizer_fixtures.json: versions, settings, strings with ids, pre-tokenizer pieces
      for gpt2/smollm/llama-bpe/qwen2, chat-template cases.
  tests/data/smollm2_tokenizer/: tokenizer.json + tokenizer_config.json (HF save_pretrained).
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import tempfile

import tokenizers
import transformers
from tokenizers import Regex, pre_tokenizers
from transformers import AutoTokenizer

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def prose_sentences(rng):
    """Real English sentences from the Debian license texts."""
    out = []
    for name in ["GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "Artistic", "GFDL-1.3", "BSD"]:
        path = os.path.join("/usr/share/common-licenses", name)
        if not os.path.exists(path):
            continue
        text = read(path)
        # Keep the original spacing and line breaks inside a sentence: they are part of the test.
        sents = [s.strip(" ") for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s) <= 600]
        rng.shuffle(sents)
        out += sents[:18]
    return out


def code_snippets(rng):
    hand = [
        '#include <vector>\nint main() {\n    std::vector<int> v{1, 2, 3};\n    return v.size() > 2 ? 0 : 1;\n}\n',
        "template <typename T>\nT clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }",
        "auto it = std::find_if(xs.begin(), xs.end(), [&](const auto& x) { return x->id == 42; });",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product",
        'def fib(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
        "import numpy as np\nx = np.linspace(0.0, 1.0, 11)\nprint(f'{x.mean():.3f}')",
        "class Foo(Base):\n\tdef __init__(self, **kw):\n\t\tsuper().__init__(**kw)\n",
        "lambda x: x**2 if x >= 0 else -x  # noqa: E731",
        '{"name": "SmolLM2", "vocab_size": 49152, "tie_word_embeddings": true, "rope_theta": 100000.0}',
        '[\n  {"id": 1, "tags": ["a", "b"]},\n  {"id": 2, "tags": []}\n]',
        '{"nested": {"deep": {"deeper": [null, false, -1.5e-3]}}}',
        "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do wc -l \"$f\"; done | sort -n | tail -3",
        "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2",
        "grep -rn 'TODO' src/ | awk -F: '{print $1}' | uniq -c",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC LIMIT 10;",
        "<html><head><title>Test</title></head><body><p class=\"x\">Hi &amp; bye</p></body></html>",
        "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
        "x := make(map[string]int)\nx[\"a\"]++\nif v, ok := x[\"b\"]; !ok { fmt.Println(v) }",
        "const f = async (u) => { const r = await fetch(u); return r.json(); };",
        "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&=n;o|=p;q^=r;",
        "if (x != y && !z || (w == 0)) { ptr->next = nullptr; }",
        "matrix = [[1, 2, 3],\n          [4, 5, 6],\n          [7, 8, 9]]",
        "    indented    with    four    spaces\n\ttab\tseparated\tvalues\n",
        "// comment\n/* block\n   comment */\n/// doc comment",
        "% LaTeX: \\frac{a}{b} + \\sum_{i=1}^{n} x_i^2 = \\int_0^1 f(x)\\,dx",
        "@@ -1,3 +1,4 @@\n-old line\n+new line\n+another\n context",
        "0x1F, 0xdeadBEEF, 0b1010, 1e-9, 6.02e23, 1_000_000, 0o777",
    ]
    real = []
    for pattern in ["/usr/lib/python3.11/json/*.py", "/usr/lib/python3.11/textwrap.py",
                    "/usr/include/fmt/core.h", "/usr/include/nlohmann/json.hpp"]:
        for path in sorted(glob.glob(pattern))[:3]:
            text = read(path)
            if len(text) < 400:
                continue
            for _ in range(3):
                start = rng.randrange(0, len(text) - 300)
                real.append(text[start:start + rng.choice([80, 200, 300])])
    return hand + real


NUMBERS = [
    "2024", "In 2024, the year had 366 days.", "3.14159", "pi is 3.14159265358979",
    "1,000,000", "$1,234.56", "-42", "+1 (555) 123-4567", "555-0199", "2024-01-15T13:45:00Z",
    "15/01/2024", "Jan 15, 2024", "v1.2.3-rc4", "192.168.0.1:8080", "50%", "1/2 + 3/4 = 5/4",
    "0.000001", "1e10", "123456789012345678901234567890", "a 12", "a  12", "x2y3z4",
    "room 101b", "٠١٢٣٤٥٦٧٨٩ (Arabic-Indic digits)", "१२३ Devanagari digits", "½ ¾ ² ³ Ⅻ ① ⑩",
    "ＦＵＬＬ ｗｉｄｔｈ １２３", "Total: 12 items @ 3.50 each = 42.00",
]

UNICODE = [
    "café naïve résumé façade coöperate", "Größe, Straße, Mädchen", "¿Dónde está la biblioteca?",
    "Ça va? Très bien, merci.", "日本語のテキストです。", "中文字符测试，包括标点符号！", "한국어 텍스트",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "Привет, мир! Ёжик.", "Γειά σου Κόσμε",
    "ภาษาไทย", "e\u0301 combining acute", "a\u0308o\u0308u\u0308 combining diaeresis",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334a\u0362l\u0360go", "ﬁ ligature ﬂ", "Ω≈ç√∫˜µ≤≥÷",
    "™ © ® ° ± × ÷ ∞ ≠", "\u200b zero width space", "non\u00a0breaking\u00a0space",
    "en\u2002space em\u2003space thin\u2009space", "ideographic\u3000space", "\u2028line sep\u2029para sep",
    "next\u0085line", "mongolian\u180evowel sep", "soft\u00adhyphen", "\ufeffBOM at start",
    "right\u200fto\u200eleft marks", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math fraktur", "𐍈 Gothic hwair", "Ꭰ Cherokee",
    "\U00040000 plane 4 char", "\U000e0041 tag char", "\ue000 private use", "Ǆ ǅ ǆ titlecase",
]

EMOJI = [
    "Hello 👋 world 🌍", "😀😃😄😁😆", "👨‍👩‍👧‍👦 family ZWJ", "🏳️‍🌈 rainbow flag", "🇺🇸🇫🇷🇯🇵 flags",
    "👍🏽 skin tone", "❤️ heart with VS16", "🧑‍💻 technologist", "✨🎉🔥💯", "1️⃣ keycap",
    "emoji at end 🤖", "🤖start", "mixed 中文 and 😀 and العربية",
]

WHITESPACE = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t\n  \n", "a   b", "a\t\tb",
    "a\n\nb", "  leading", "trailing  ", "  both  ", "a \n b", "line1\nline2\r\nline3\rline4",
    "     12", "x \t y", "\v\f vertical tab and form feed", "word\n\n\n\n\nword", " \u00a0 ",
    "a" + " " * 17 + "b", "\n" * 9, "\t \t \t", "end with newline\n", "x    \n    y",
]

CONTRACTIONS = [
    "it's", "don't", "they're", "we've", "I'm", "you'll", "he'd", "IT'S", "DON'T", "We'Re",
    "'s 't 're 've 'm 'll 'd", "rock 'n' roll", "the cat's toy", "O'Brien's pub", "'twas",
    "can't won't shouldn't", "'S 'T 'RE", "x's' y't", "’s curly apostrophe",
]

SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "text<|endoftext|>more", "<|im_st",
    "<|im_start", "<|im_start|", "<|im_end|><|im_start|>", "<|im_start|><|im_start|><|im_start|>",
    " <|im_start|> spaced ", "<repo_name>hydra<file_sep>main.cpp", "<filename>a.py\n<gh_stars>10",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>1", "<|endoftext|x", "<<|im_end|>>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "<empty_output>", "<issue_start>bug<issue_comment>fix<issue_closed>", "<|IM_START|>",
]

CONTROL = [
    "a\x01b", "i\x04n", "\x04", "\x06\x13\x14\x16\x1d", "x\x00y", "bell\x07", "esc\x1b[31mred\x1b[0m",
    "\x7f delete", "del\x7fete", "\x1f unit sep", "\x1c\x1d\x1e", "tab\x0bvt", "\x08backspace",
    "th\x04e", "\x16the", " \x14 ", "a\x00\x00\x00b", "\U00080000x",
    # A dropped byte inside one pre-token: its neighbours become adjacent and merge ("!!").
    "!\x04!", "..\x04..", "?\x13?", "wait!\x1d!\x06?",
]


def random_strings(rng, n):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " \t\n\r", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "éèêëàâäôöûüçñßøåæœ", "日本語中文한국어", "абвгдежзий", "αβγδεζηθ", "😀👍🏽🇺🇸‍❤️",
        "\u0301\u0308\u200b\u00a0\u3000\u2028\u0085", "٠١٢٣४५६", "\x01\x04\x13\x7f",
    ]
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        chosen = rng.sample(pools, rng.randint(1, 4))
        out.append("".join(rng.choice(rng.choice(chosen)) for _ in range(length)))
        if rng.random() < 0.2:
            out[-1] += rng.choice(["<|im_end|>", "<|endoftext|>", "'s", "  ", "2024"])
    return out


def long_strings(rng):
    gpl = read("/usr/share/common-licenses/GPL-3") if os.path.exists("/usr/share/common-licenses/GPL-3") else ""
    apache = read("/usr/share/common-licenses/Apache-2.0") if os.path.exists("/usr/share/common-licenses/Apache-2.0") else ""
    out = []
    if gpl:
        out.append(gpl[:12000])
    if apache:
        out.append(apache[2000:9000])
    out.append(" ".join(str(rng.randint(0, 10**6)) for _ in range(1500)))
    out.append(" " * 6000 + "x")
    out.append("ab" * 4000)
    out.append("日本語" * 2000)
    out.append("\n".join("    " * (i % 5) + f"line {i}: value = {i * 7 % 13}" for i in range(400)))
    return out


def pieces_raw(pre, text, byte_level):
    """HF pre_tokenize_str pieces; byte-level ones are mapped back from the GPT-2 alphabet to raw text."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    u2b = {u: b for b, u in bytes_to_unicode().items()}
    out = []
    for piece, _ in pre.pre_tokenize_str(text):
        if byte_level:
            piece = bytes(u2b[c] for c in piece).decode("utf-8")
        out.append(piece)
    return out


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--gguf", default=os.path.join(root, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(root, "tests/data"))
    args = ap.parse_args()
    rng = random.Random(1234)

    # HF's own conversion of the GGUF, as shipped (gpt2 pre-tokenizer).
    hf_gpt2 = AutoTokenizer.from_pretrained(os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf))
    gpt2_backend = hf_gpt2.backend_tokenizer
    assert json.loads(gpt2_backend.to_str())["pre_tokenizer"]["type"] == "ByteLevel"

    # The same tokenizer with SmolLM2's real pre-tokenizer.
    hf = AutoTokenizer.from_pretrained(os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf))
    smollm_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    hf.backend_tokenizer.pre_tokenizer = smollm_pre
    backend = hf.backend_tokenizer

    # What HF adds by default: record it (GPT2-style tokenizers add no BOS).
    default_ids = hf("hello").input_ids
    plain_ids = backend.encode("hello", add_special_tokens=False).ids

    # Save tokenizer.json + tokenizer_config.json for our loader.
    tok_dir = os.path.join(args.out, "smollm2_tokenizer")
    tmp = tempfile.mkdtemp()
    hf.save_pretrained(tmp)
    os.makedirs(tok_dir, exist_ok=True)
    # transformers 5 writes the chat template to a separate file; write the classic tokenizer_config.json
    # (as in the SmolLM2 repos) ourselves so the loader sees the fields it reads.
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": hf.bos_token,
        "eos_token": hf.eos_token,
        "pad_token": hf.pad_token,
        "unk_token": hf.unk_token,
        "chat_template": hf.chat_template,
        "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer",
    }
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    shutil.rmtree(tmp)
    backend.save(os.path.join(tok_dir, "tokenizer.json"), pretty=False)  # compact: about half the size
    reloaded = tokenizers.Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))

    texts = ([""] + prose_sentences(rng) + code_snippets(rng) + NUMBERS + UNICODE + EMOJI + WHITESPACE +
             CONTRACTIONS + SPECIAL + CONTROL + random_strings(rng, 60) + long_strings(rng))
    seen = set()
    entries = []
    for text in texts:
        if text in seen:
            continue
        seen.add(text)
        ids = backend.encode(text, add_special_tokens=False).ids
        assert reloaded.encode(text, add_special_tokens=False).ids == ids, repr(text)
        ids_gpt2 = gpt2_backend.encode(text, add_special_tokens=False).ids
        decoded = backend.decode(ids, skip_special_tokens=False)
        entries.append({
            "text": text,
            "ids": ids,
            "ids_gpt2": ids_gpt2,
            "hf_decoded": decoded,
            "hf_roundtrip": decoded == text,
            "hf_decoded_skip_special": backend.decode(ids, skip_special_tokens=True),
        })

    pre_cases = [
        "a   b", "a 12", "Hello, world! It's 2024.", "  leading and trailing  ", "x\n\n  y\r\n z",
        "I'M DON'T we'Ve", "日本語 text 123 ١٢٣", "tabs\t\tand\tnewlines\n", "$1,234.56 and 99%",
        "emoji 👋🏽 here", "multiple   spaces   here   ", "a\u00a0b\u3000c\u2028d\u0085e\u180ef",
        "\u2002x\u200by", "foo_bar-baz.qux", "((nested)) [brackets]", "12345678", "a1b22c333d4444",
        "\n\n\nstart", "end\n\n\n", "  \n  \n", "'s", "x's", " 's", "\u00bd\u2168\u2460",
        "\x1c\x1d\x1e\x1f sep", "\v\f", "mixed\r\n\r\nlines\n", "...!!!???", " ?", "? ",
        "\x85!", "a\x85\x85b", "\u180e!", "x \u2003 y", "\u00a0\u00a0word", "12 345\n6", "don't 's'S",
    ]
    pre_splits = {
        "gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        "smollm": smollm_pre,
        "llama-bpe": pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        "qwen2": pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
    }
    pretok = [{"text": t, **{k: pieces_raw(v, t, k in ("gpt2", "smollm")) for k, v in pre_splits.items()}} for t in pre_cases]

    default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert default_system in hf.chat_template
    chats = [
        ([{"role": "user", "content": "hi"}], True),
        ([{"role": "user", "content": "hi"}], False),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}], True),
        ([{"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the chicken..."},
          {"role": "user", "content": "Another one, please!"}], True),
        ([{"role": "user", "content": ""}], True),
        ([{"role": "user", "content": "Multi\nline\n\ncontent with 日本語 and 😀"}], True),
        ([{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}], False),
        ([{"role": "system", "content": ""}, {"role": "user", "content": "<|im_end|> inside"}], True),
    ]
    chat_cases = []
    for messages, gen in chats:
        text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        chat_cases.append({
            "messages": messages,
            "add_generation_prompt": gen,
            "text": text,
            "ids": backend.encode(text, add_special_tokens=False).ids,
        })

    out = {
        "generator": "tools/make_tokenizer_fixtures.py",
        "transformers_version": transformers.__version__,
        "tokenizers_version": tokenizers.__version__,
        "gguf": os.path.basename(args.gguf),
        "settings": {
            "ids": "HF AutoTokenizer(gguf_file) with pre_tokenizer Sequence[Digits(individual_digits=true), "
                   "ByteLevel(add_prefix_space=false, use_regex=true)] (= GGUF pre 'smollm'), "
                   "encode(add_special_tokens=False)",
            "ids_gpt2": "HF AutoTokenizer(gguf_file) as converted by transformers (plain ByteLevel = gpt2 regex)",
            "hf_default_add_special_tokens_ids_for_hello": default_ids,
            "hf_plain_ids_for_hello": plain_ids,
            "hf_default_adds_bos": default_ids != plain_ids,
        },
        "default_system": default_system,
        "chat_template": hf.chat_template,
        "strings": entries,
        "pretokenizer": pretok,
        "chat": chat_cases,
    }
    path = os.path.join(args.out, "tokenizer_fixtures.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None)
        f.write("\n")
    n_rt = sum(e["hf_roundtrip"] for e in entries)
    n_diff = sum(e["ids"] != e["ids_gpt2"] for e in entries)
    print(f"wrote {path}: {len(entries)} strings ({n_rt} round-trip in HF, {n_diff} differ smollm vs gpt2), "
          f"{len(pretok)} pre-tokenizer cases, {len(chat_cases)} chat cases; default adds BOS: "
          f"{out['settings']['hf_default_adds_bos']}")


if __name__ == "__main__":
    main()
