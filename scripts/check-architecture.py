#!/usr/bin/env python3
"""Checks that docs/architecture.md matches Package.swift and that the repository stands alone.

1. Every library module in the architecture table has exactly the dependencies (on the
   package's own modules) that `swift package dump-package` reports, and the other way round.
2. No file under Sources/Inference imports Training (the two executors stay independent).
3. No tracked file names a folder beside the repository (the parent's shared folder) or this
   machine's absolute paths.
4. Every relative link in the tracked markdown (README.md, docs/, examples/, Schema.md) names a
   file or folder of the repository, and a #fragment names a heading of the markdown file it
   points to (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
Prints what differs and exits 1; prints one line and exits 0 when all holds. Run from anywhere.
"""
import json
import os
import re
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
problems = []

# 1. the table against the manifest
dump = json.loads(subprocess.run(["swift", "package", "dump-package"], cwd=root, check=True,
                                 capture_output=True, text=True).stdout)
targets = {t["name"]: t for t in dump["targets"]}
own = set(targets)


def deps(target):
    out = set()
    for d in target.get("dependencies", []):
        for kind in ("byName", "target"):
            if kind in d:
                name = d[kind][0]
                if name in own:
                    out.add(name)
    return out


table = {}
for line in open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8"):
    m = re.match(r"^\| `(\w+)` \| .* \| ([^|]*) \|\s*$", line)
    if m:
        listed = {w for w in re.findall(r"[A-Za-z]+", m.group(2)) if w in own}
        table[m.group(1)] = listed
libraries = {n for n, t in targets.items() if t["type"] in ("regular", "system") and not t.get("path", "").startswith("Tests")}
for name in sorted(libraries - set(table)):
    problems.append(f"docs/architecture.md: module {name} (Package.swift) is missing from the table")
for name, listed in sorted(table.items()):
    if name not in targets:
        problems.append(f"docs/architecture.md: module {name} is in the table but not in Package.swift")
        continue
    actual = deps(targets[name])
    if listed != actual:
        problems.append(f"docs/architecture.md: {name} depends on {sorted(actual)} in Package.swift, the table says {sorted(listed)}")

# 2. Inference does not import Training
for dirpath, _, files in os.walk(os.path.join(root, "Sources", "Inference")):
    for f in files:
        path = os.path.join(dirpath, f)
        for i, line in enumerate(open(path, encoding="utf-8"), 1):
            if re.match(r"^\s*(@testable\s+)?import\s+(Training|Distillation|Evaluation|Export)\b", line):
                problems.append(f"{os.path.relpath(path, root)}:{i}: Inference imports {line.split()[-1]}")

# 3. nothing points outside the repository
tracked = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True).stdout.split("\n")
outside = re.compile(r"\.\./shared|/work/(main|shared|wt-)|/root/\.cache/adapter-peers/[a-z]")
for rel in tracked:
    if not rel or rel == "scripts/check-architecture.py":
        continue
    path = os.path.join(root, rel)
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        continue
    for i, line in enumerate(text.split("\n"), 1):
        if outside.search(line):
            problems.append(f"{rel}:{i}: points outside the repository: {line.strip()[:120]}")

# 4. relative links in the markdown resolve
def anchors(path):
    """The heading anchors of a markdown file as GitHub makes them (duplicates numbered)."""
    seen, out, fenced = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


markdown = [rel for rel in tracked if rel.endswith(".md") and (rel in ("README.md", "Schema.md") or rel.startswith(("docs/", "examples/")))]
links = 0
for rel in markdown:
    text = open(os.path.join(root, rel), encoding="utf-8").read()
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)  # code is not links
    for i, line in enumerate(text.split("\n"), 1):
        for target in re.findall(r"\]\(([^()\s]+)\)", re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            links += 1
            path, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(os.path.join(root, rel)), path)) if path else os.path.join(root, rel)
            if not os.path.exists(resolved) or not resolved.startswith(root):
                problems.append(f"{rel}:{i}: link to {target}: no such file in the repository")
            elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                problems.append(f"{rel}:{i}: link to {target}: {os.path.relpath(resolved, root)} has no heading with that anchor")

if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"architecture: {len(table)} modules match Package.swift; Inference does not import Training; nothing points outside the repository; {links} relative links in {len(markdown)} markdown files resolve")
