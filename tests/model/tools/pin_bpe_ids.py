#!/usr/bin/env python3
"""Pin byte-level BPE token ids and pre-tokenizer pieces from Hugging Face `tokenizers`, an
independent implementation, for tests/model/test_tokenizer_bpe.cpp.

The GGUF's vocabulary, merges and special tokens (token_type CONTROL or USER_DEFINED) are
loaded into a `tokenizers.Tokenizer` whose pre-tokenizer is the one the Hugging Face model
ships for that `tokenizer.ggml.pre` (its tokenizer.json), not derived from tapdiff's code.

Needs `tokenizers` and `gguf` from PyPI (a throwaway venv; not needed at test time):
  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers gguf
  build/app/tapdiff fixture --arch qwen2 --n-vocab 1024 -o /tmp/bpe_fixture.gguf
  /tmp/tokvenv/bin/python tests/model/tools/pin_bpe_ids.py \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --pre smollm \\
      --out tests/model/tokenizer_cases/smollm2.json --model-made-by scripts/fetch-models.sh
  /tmp/tokvenv/bin/python tests/model/tools/pin_bpe_ids.py \\
      --model /tmp/bpe_fixture.gguf --pre default gpt2 smollm qwen2 llama-bpe \\
      --out tests/model/tokenizer_cases/fixture_qwen2_1024.json \\
      --model-made-by "tapdiff fixture --arch qwen2 --n-vocab 1024"
"""
import argparse
import hashlib
import json
import os
import sys
from importlib.metadata import version

import gguf
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# Qwen2's and Llama 3's tokenizer.json Split regexes.
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's fallback for "default" (no Hugging Face model has it): four regexes in turn.
DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
           r"\p{N}+", r"[0-9][0-9][0-9]"]


def byte_level(use_regex):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def isolated(regex):
    return pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)


PRE = {
    # GPT-2: ByteLevel's own regex.
    "gpt2": lambda: byte_level(True),
    # SmolLM2's tokenizer.json: Digits(individual_digits) then ByteLevel with its regex.
    "smollm": lambda: pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level(True)]),
    # Qwen2 and Llama 3: Split(regex, isolated) then ByteLevel without regex.
    "qwen2": lambda: pre_tokenizers.Sequence([isolated(QWEN2), byte_level(False)]),
    "llama-bpe": lambda: pre_tokenizers.Sequence([isolated(LLAMA3), byte_level(False)]),
    "default": lambda: pre_tokenizers.Sequence([isolated(r) for r in DEFAULT] + [byte_level(False)]),
}

TEXTS = [
    "Hello, world!",
    "Hello world! 123",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine; we've done what you'd",
    "DON'T SHOUT, It'S ok 'Re",
    "Wait... what?!? (yes) [no] {maybe} a+b=c; x->y && z || w ~$5^2",
    "#include <stdio.h>\nint main() { return 0; }",
    "def f(x):\n    return x ** 2  # square\n",
    "email@example.com https://example.org/a?b=c&d=e",
    "1234567890",
    "12345678901234567890 digits",
    "3.14159 and 2,718,281",
    "year 2024: 12 apples, 007",
    "  multiple   spaces",
    "trailing spaces   ",
    "   leading",
    "tab\tseparated\t\tvalues",
    "line1\nline2\n\nline4",
    "CRLF\r\nline\r\n\r\n",
    "a \n b  \n\n  c",
    "\n",
    " ",
    "",
    "Café déjà vu.",
    "naïve façade Ångström Zürich",
    "Ελληνικά κείμενο",
    "Привет, мир!",
    "你好，世界！",
    "日本語のテキスト、カタカナ",
    "한국어 문장입니다",
    "I \u2764\ufe0f tokenizers \U0001F917\U0001F389",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467 family",
    "x\u00b2+y\u00b2=z\u00b2 \u00bd \u0661\u0662\u0663",
    "\uff21\uff22\uff23\uff11\uff12\uff13",
    "non\u00a0breaking\u2003em\u3000ideographic",
    "zero\u200bwidth",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more <|endoftext|> end",
    "<|endoftext|>",
]


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def scalar(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.parts[f.data[0]][0]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(tokens, merges, types, pre):
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=(pre == "llama-bpe")))
    tok.pre_tokenizer = PRE[pre]()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty in (3, 4)])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF with a gpt2 tokenizer")
    ap.add_argument("--pre", nargs="+", required=True, choices=sorted(PRE))
    ap.add_argument("--out", required=True)
    ap.add_argument("--model-made-by", default="", help="how the GGUF was obtained, recorded in the pins")
    args = ap.parse_args()

    r = gguf.GGUFReader(args.model)
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    merges = field_strings(r, "tokenizer.ggml.merges")
    types = field_ints(r, "tokenizer.ggml.token_type")
    bos = scalar(r, "tokenizer.ggml.bos_token_id")
    add_bos = bool(scalar(r, "tokenizer.ggml.add_bos_token", False))

    cases = []
    for pre in args.pre:
        tok = build(tokens, merges, types, pre)
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            if add_bos:
                ids = [int(bos)] + ids
            pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
            cases.append({"pre": pre, "text": text, "ids": ids, "pieces": pieces})

    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    out = {
        "generated_by": f"{command} (tokenizers {tokenizers.__version__}, gguf {version('gguf')})",
        "model": os.path.basename(args.model),
        "model_made_by": args.model_made_by,
        "model_sha256": sha256(args.model),
        "n_vocab": len(tokens),
        "n_merges": len(merges),
        "cases": cases,
    }
    # One case per line: reviewable diffs when a pin changes.
    head = json.dumps({k: v for k, v in out.items() if k != "cases"}, ensure_ascii=False, indent=1)
    lines = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in cases)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(head[:-2] + ',\n "cases": [\n  ' + lines + "\n ]\n}\n")


if __name__ == "__main__":
    main()
