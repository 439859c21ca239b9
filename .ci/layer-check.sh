#!/usr/bin/env bash
# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# Fails on an include that runs back up the layer order. The order, and which folders of src/ and which public
# headers belong to each layer, are written once, in docs/design.md ("The layers"); this script reads them
# from there. A file may include its own layer and the layers below it; a public header that no layer names
# fails too, so a new header is placed when it is added.
#
#   .ci/layer-check.sh [ROOT]      (default: the checkout this script is in)
#
# Checked: include/saferetry/**/*.h and src/**/*.{h,cc}, their `#include "saferetry/..."` and their includes
# of src/'s private headers ("common/...", "core/...", ...). Pure text: it needs no build and takes well under
# a second.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
exec python3 - "$root" <<'PY'
import os
import re
import sys

root = sys.argv[1]

# Includes that still run upward, each with the reason it is allowed for now. Keep this list short: an entry
# goes when its include is fixed (a stale entry fails the check).
ALLOWED = set()

design = os.path.join(root, "docs", "design.md")
text = open(design, encoding="utf-8").read()
m = re.search(r"<!-- layers: .*?-->\s*```[^\n]*\n(.*?)```", text, re.S)
if not m:
    sys.exit("layer-check: docs/design.md has no layer table (<!-- layers: ... --> and a code block)")

layers = []     # names, lowest first
dir_layer = {}  # "src/common" -> layer
hdr_layer = {}  # "clock" or "server/*" -> layer
current = None
for line in m.group(1).splitlines():
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    if not line[0].isspace():
        name, _, rest = line.partition(":")
        current = name.strip()
        layers.append(current)
    elif current is None:
        sys.exit("layer-check: docs/design.md: a continuation line before the first layer")
    else:
        rest = line
    for word in rest.split():
        if word.startswith("src/"):
            dir_layer[word.rstrip("/")] = current
        else:
            hdr_layer[word] = current
rank = {name: i for i, name in enumerate(layers)}


def header_layer(name):
    """The layer of include/saferetry/<name>.h, or None."""
    if name in hdr_layer:
        return hdr_layer[name]
    if "/" in name:
        return hdr_layer.get(name.split("/")[0] + "/*")
    return None


def dir_of(path):
    """The layer of a path under src/ (the longest folder named), or None."""
    best = None
    for d, layer in dir_layer.items():
        if (path == d or path.startswith(d + "/")) and (best is None or len(d) > len(best[0])):
            best = (d, layer)
    return best[1] if best else None


errors = []
files = []
for base, exts in (("include/saferetry", (".h",)), ("src", (".h", ".cc"))):
    for dirpath, _, names in os.walk(os.path.join(root, base)):
        for n in sorted(names):
            if n.endswith(exts):
                files.append(os.path.relpath(os.path.join(dirpath, n), root))

private_roots = {d.split("/")[1] for d in dir_layer}
include_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
seen_allowed = set()
for f in sorted(files):
    if f.startswith("include/saferetry/"):
        own = header_layer(f[len("include/saferetry/"):-2])
        if own is None:
            errors.append(f"{f}: no layer in docs/design.md names this header")
            continue
    else:
        own = dir_of(f)
        if own is None:
            errors.append(f"{f}: no layer in docs/design.md names its folder")
            continue
    for inc in include_re.findall(open(os.path.join(root, f), encoding="utf-8").read()):
        if inc.startswith("saferetry/") and inc.endswith(".h"):
            theirs = header_layer(inc[len("saferetry/"):-2])
        elif inc.split("/")[0] in private_roots:
            theirs = dir_of("src/" + inc)
        else:
            continue  # absl, libcurl, the tests' own headers, ...
        if theirs is None:
            errors.append(f"{f}: includes {inc}, which no layer names")
        elif rank[theirs] > rank[own]:
            if (f, inc) in ALLOWED:
                seen_allowed.add((f, inc))
            else:
                errors.append(f"{f} ({own}) includes {inc} ({theirs}), a layer above it")

for f, inc in sorted(ALLOWED - seen_allowed):
    errors.append(f"allowed upward include no longer found, remove it from .ci/layer-check.sh: {f} -> {inc}")

if errors:
    print("layer-check: the layer order is " + " < ".join(layers) + " (docs/design.md, \"The layers\")")
    for e in errors:
        print("layer-check: " + e)
    sys.exit(1)
print(f"layer-check: {len(files)} files, {len(layers)} layers, no include runs upward "
      f"({len(ALLOWED)} allowed for now)")
PY
