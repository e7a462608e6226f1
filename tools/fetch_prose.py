#!/usr/bin/env python3
"""Extracts free English prose from Debian packages into .cache/prose/ (research/ruler.md §4).

Packages are fetched with `apt-get download` and unpacked with `dpkg -x` (nothing is installed).
Sources: Jane Austen's six novels (r-cran-janeaustenr, R data), Moby-Dick (r-cran-tokenizers, R
data), the Jargon File (jargon-text). R data files (.rdb) hold zlib-compressed XDR-serialised
character vectors; a tiny reader for exactly that case is below. Idempotent; offline once cached.
Files written: austen_<novel>.txt, mobydick.txt, jargon.txt, and manifest.json with sizes and
sha256, so every later run and every test sees the same bytes.
"""
import gzip
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("HYDRA_CACHE", os.path.join(ROOT, ".cache"))
OUT = os.path.join(CACHE, "prose")
PACKAGES = ["r-cran-janeaustenr", "r-cran-tokenizers", "jargon-text"]


def parse_r_strings(blob):
    """Parses one serialised R object (XDR, format 2 or 3) that is a character vector (STRSXP)
    and returns its strings. Raises ValueError on anything else."""
    if blob[:2] != b"X\n":
        raise ValueError("not an XDR R serialisation")
    pos = 2
    version = struct.unpack(">i", blob[pos:pos + 4])[0]
    pos += 12
    if version == 3:
        n = struct.unpack(">i", blob[pos:pos + 4])[0]
        pos += 4 + n
    flags = struct.unpack(">i", blob[pos:pos + 4])[0]
    pos += 4
    if flags & 0xFF != 16:
        raise ValueError(f"expected a character vector (STRSXP), found SEXP type {flags & 0xFF}")
    count = struct.unpack(">i", blob[pos:pos + 4])[0]
    pos += 4
    out = []
    for _ in range(count):
        cflags, length = struct.unpack(">ii", blob[pos:pos + 8])
        pos += 8
        if cflags & 0xFF != 9:
            raise ValueError("expected CHARSXP")
        if length < 0:
            out.append("")
            continue
        out.append(blob[pos:pos + length].decode("utf-8", errors="replace"))
        pos += length
    return out


def rdb_objects(rdb_path):
    """Yields every serialised object in an .rdb: each is a 4-byte big-endian length followed by a
    zlib stream (R's 'compressed=TRUE' lazy-load format)."""
    data = open(rdb_path, "rb").read()
    pos = 0
    while pos + 4 <= len(data):
        d = zlib.decompressobj()
        try:
            blob = d.decompress(data[pos + 4:])
        except zlib.error:
            pos += 1
            continue
        consumed = len(data) - pos - 4 - len(d.unused_data)
        yield blob
        pos += 4 + consumed


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    manifest_path = os.path.join(OUT, "manifest.json")
    if os.path.exists(manifest_path):
        print(f"[prose] cached in {OUT}")
        return 0
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tree = os.path.join(tmp, "x")
        for deb in sorted(f for f in os.listdir(tmp) if f.endswith(".deb")):
            subprocess.run(["dpkg", "-x", os.path.join(tmp, deb), tree], check=True)
        files = {}
        austen = os.path.join(tree, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb")
        novels = [s for s in rdb_objects(austen)]
        names = ["emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility"]
        texts = []
        for blob in novels:
            try:
                texts.append("\n".join(parse_r_strings(blob)))
            except ValueError:
                pass
        texts = [t for t in texts if len(t) > 100000]
        if len(texts) != 6:
            print(f"[prose] expected 6 Austen novels, found {len(texts)}", file=sys.stderr)
            return 1
        # The objects are stored in alphabetical order of their names.
        for name, text in zip(names, texts):
            files[f"austen_{name}.txt"] = text
        moby = os.path.join(tree, "usr/lib/R/site-library/tokenizers/data/Rdata.rdb")
        for blob in rdb_objects(moby):
            try:
                strings = parse_r_strings(blob)
            except ValueError:
                continue
            text = "\n".join(strings).replace("\r\n", "\n")
            if len(text) > 1000000:
                files["mobydick.txt"] = text
        jargon = os.path.join(tree, "usr/share/doc/jargon-text/jargon.txt.gz")
        files["jargon.txt"] = gzip.open(jargon, "rt", encoding="utf-8", errors="replace").read()
        manifest = {}
        for name, text in files.items():
            write_atomic(os.path.join(OUT, name), text)
            b = text.encode("utf-8")
            manifest[name] = {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}
        write_atomic(manifest_path, json.dumps(manifest, indent=1))
    print(f"[prose] wrote {len(files)} files to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
