#!/usr/bin/env python3
"""Builds the tokenizer exactness corpus (docs/tokenize.md).

  make_corpus.py --out CORPUS.jsonl --invalid INVALID.bin [--real-bytes N] [--seed S]

Real text: files Debian installs, read as UTF-8 (files that are not are
skipped), cut into documents of 64 B .. 32 KB, taken round-robin from
documentation (/usr/share/doc), man pages in every installed language
(decompressed roff), C/C++ headers (/usr/include) and locale definitions
(/usr/share/i18n), up to N bytes. Generated hard cases follow: every Unicode
general category, combining marks and NFC/NFD pairs, emoji ZWJ sequences,
long whitespace and digit runs, special-token look-alikes, CRLF, contractions.
CORPUS.jsonl: one JSON string per line. INVALID.bin: byte strings that are not
UTF-8, each preceded by its uint32 little-endian length.
"""
import argparse
import gzip
import json
import os
import random
import struct
import sys
import unicodedata

SOURCES = {
    "doc": ["/usr/share/doc"],
    "man": ["/usr/share/man"],
    "include": ["/usr/include"],
    "i18n": ["/usr/share/i18n/locales"],
}


def list_files(roots):
    files = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    files.append(path)
    return files


def read_text(path):
    try:
        if os.path.getsize(path) > 4 << 20:
            return None
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(4 << 20)
        else:
            with open(path, "rb") as f:
                data = f.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    if "\x00" in text:
        return None
    return text


def chunks(text, rng):
    pos = 0
    while pos < len(text):
        size = rng.choice([64, 256, 1024, 4096, 16384, 32768])
        yield text[pos:pos + size]
        pos += size


def real_documents(budget, rng):
    lists = {}
    for name, roots in SOURCES.items():
        files = list_files(roots)
        rng.shuffle(files)
        lists[name] = iter(files)
    used = 0
    active = list(lists)
    while used < budget and active:
        for name in list(active):
            path = next(lists[name], None)
            if path is None:
                active.remove(name)
                continue
            text = read_text(path)
            if not text:
                continue
            # At most 64 KB of one file: variety over volume.
            for doc in chunks(text[:65536], rng):
                yield doc
                used += len(doc.encode("utf-8"))
                if used >= budget:
                    return


def category_samples(rng):
    by_category = {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        by_category.setdefault(unicodedata.category(chr(cp)), []).append(cp)
    docs = []
    for category in sorted(by_category):
        cps = by_category[category]
        picks = rng.sample(cps, min(64, len(cps)))
        chars = [chr(c) for c in picks]
        # Marks one by one on a base: long runs of marks from unrelated
        # scripts reorder differently under Unicode 15 (utf8proc) and 16 (HF).
        docs.append("".join(("a" + c) if category.startswith("M") else c for c in chars))
        docs.append(" ".join(chars))
        docs.append(" ".join("a%sb 1%s2 %s%s" % (c, c, c, c) for c in chars[:16]))
        docs.append("\n".join("x %s'd %s\t%s" % (c, c, c) for c in chars[:16]))
    return docs


def hard_cases(rng):
    docs = ["", " ", "a", "\n", "\t", "  ", "\u00a0", "\u3000", "\u0085"]
    docs += category_samples(rng)
    # Combining marks, NFC / NFD pairs, Hangul.
    marks = [chr(c) for c in range(0x300, 0x370)]
    for base in "aeiouAOnczs\u0391\u03b9\u0430":
        docs.append(base + "".join(rng.sample(marks, 3)) + " " + unicodedata.normalize("NFD", base + "\u0301\u0308"))
    docs.append(unicodedata.normalize("NFD", "Übergrößenträger café naïve résumé Ångström ḱṷṓn"))
    docs.append(unicodedata.normalize("NFC", "Übergrößenträger café naïve résumé Ångström ḱṷṓn"))
    docs.append(unicodedata.normalize("NFD", "한국어 텍스트 정규화 테스트") + " 한국어")
    docs.append("\u1100\u1161\u11a8 \u0915\u094d\u0937 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e9\u05b8\u05c1")
    docs.append("e\u0301\u0301\u0301 \u212b \u2126 \u1e9b\u0323 \ufb01 \u2460 \uff21\uff11 \u00bd")
    # Emoji ZWJ sequences, flags, skin tones, keycaps, variation selectors.
    docs.append("👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 🇩🇪🇯🇵🇺🇸 1️⃣ #️⃣ ❤️ ✌🏿 🧑‍🤝‍🧑 👁️‍🗨️ 😀😃😄😁")
    docs.append("emoji👍in🎉text🚀!!! " * 20)
    # Whitespace runs, digit runs.
    for n in [1, 2, 3, 4, 7, 16, 33, 100, 257]:
        docs.append(" " * n + "x" + " " * n)
        docs.append("a" + "\t" * n + "b" + "\n" * n + "c" + " \n" * n)
        docs.append("\u00a0" * n + "y" + "\u3000" * n + "\u2009" * n)
        docs.append("7" * n + " " + "1234567890"[: n % 10] + "\u0661\u0662\u0663" * (n % 7 + 1) + "\uff11\uff12" * 3)
    docs.append(" " * 5000)
    docs.append("0" * 5000)
    docs.append("\n" * 3000 + "end")
    docs.append("word " * 3000)
    docs.append("x" * 20000)
    docs.append("".join(rng.choice("ab \n") for _ in range(20000)))
    # Special-token look-alikes from the model families.
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|reserved_special_token_5|>", "<|im_start|>", "<|im_end|>",
                "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|fim_prefix|>",
                "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                "<｜tool▁calls▁begin｜>", "<s>", "</s>", "<unk>", "<bos>", "<eos>", "<pad>",
                "<start_of_turn>", "<end_of_turn>", "<unused17>", "<start_of_image>", "[multimodal]",
                "<mask>", "▁▁▁", "▁"]
    for s in specials:
        docs.append(s)
        docs.append("x" + s + "y")
        docs.append(" " + s + " hello " + s + s + "\n")
        docs.append(s[:-1] + " " + s[1:] + " <" + s + ">" + s.upper())
    docs.append("".join(rng.choice(specials) + rng.choice(["", " ", "\n", "a", "  "]) for _ in range(300)))
    docs.append("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    docs.append("<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n")
    # CRLF, lone CR, mixed line ends; contractions and case-folding look-alikes.
    docs.append("line one\r\nline two\r\n\r\n  indented\r\n\ttab\rlone cr\n\r\nend\r\n")
    docs.append("a\r\n" * 200 + " \r\n \r\n")
    docs.append("I'm you're he's she'll we'd they've it'S WE'LL YOU'RE don't DON'T ſ'ſ 'Ş 'K 'K")
    docs.append("He said ‘it’s’ and “quoted” — dash – en; l'été d'un o’clock")
    # Code and mixed scripts in one line.
    docs.append("for (int i = 0; i < n; ++i) { x += a[i] * 0x1F; } // コメント 注释 주석 комментарий")
    docs.append("日本語のテキストと中文文本和한국어 텍스트 mixed with English and العربية and हिन्दी")
    return docs


def invalid_cases():
    return [b"\xff", b"abc\xfe", b"\xc3", b"a\xc3(b", b"\xe2\x82", b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf8\x88\x80\x80\x80",
            b"valid text then \x80 continuation", b"<|im_start|>\xff<|im_end|>", b"\xef\xbb\xbf\xff"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--invalid", required=True)
    parser.add_argument("--real-bytes", type=int, default=2 << 20)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    count = 0
    size = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for doc in list(hard_cases(rng)) + list(real_documents(args.real_bytes, rng)):
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += 1
            size += len(doc.encode("utf-8"))
    with open(args.invalid, "wb") as out:
        for case in invalid_cases():
            out.write(struct.pack("<I", len(case)) + case)
    print("corpus: %d documents, %d bytes (Unicode %s)" % (count, size, unicodedata.unidata_version),
          file=sys.stderr)


if __name__ == "__main__":
    main()
