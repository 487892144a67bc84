"""The source layout's rules, checked from the code (exit 1 on any breach):

- no import cycle between top-level modules of src/ (a module = a folder or a file directly
  under src/), read from `use crate::X` and `crate::X::` paths outside unit tests;
- no import cycle between files either (scripts/file_graph.py says what counts as an
  import): a folder's files depend on each other one way;
- dependencies point one way across the layers: a technology (`pulsar`, `redis`, `delta`) or
  an interface (`source`, `sink`) never imports a role (`pipeline`, `serving`, `audit`, `training`,
  `cli`) or `http`, and `http` (listeners, probes) does not import `serving` (serving builds
  on http);
- no source file over MAX_LINES lines;
- one place for unit tests: a file's own tests in `#[cfg(test)] mod tests { ... }` at its end,
  tests that drive several files of a folder together in that folder's `tests.rs` (declared
  `#[cfg(test)] mod tests;` in its mod.rs); no `#[path]` attributes, no `*_tests.rs` files.

Usage: python3 scripts/check_layout.py [src]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from file_graph import Crate  # noqa: E402

MAX_LINES = 500
# (importing module path prefix, forbidden top-level module): the arrow would point up.
LOWER = ("pulsar", "redis", "delta", "source", "sink")
ROLES = ("pipeline", "serving", "audit", "training", "cli", "http")
FORBIDDEN = [(low, role) for low in LOWER for role in ROLES] + [("http", "serving")]


def rust_files(src):
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if name.endswith(".rs"):
                yield os.path.join(root, name)


def without_unit_tests(text):
    return re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    problems = []
    deps = {}
    for path in rust_files(src):
        rel = os.path.relpath(path, src).split(os.sep)
        top = rel[0][:-3] if len(rel) == 1 else rel[0]
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n")
        name = os.path.basename(path)
        if name.endswith("_tests.rs"):
            problems.append(f"{path}: tests go in the file's own `mod tests` or the folder's tests.rs")
        if re.search(r"#\[path\s*=", text):
            problems.append(f"{path}: a #[path] attribute (tests go in `mod tests` or the folder's tests.rs)")
        if name == "tests.rs":
            parent = os.path.join(os.path.dirname(path), "mod.rs")
            declared = os.path.exists(parent) and re.search(
                r"#\[cfg\(test\)\]\s*mod tests;", open(parent, encoding="utf-8").read())
            if not declared:
                problems.append(f"{path}: a folder's tests.rs is declared `#[cfg(test)] mod tests;` in its mod.rs")
        if lines > MAX_LINES:
            problems.append(f"{path}: {lines} lines (at most {MAX_LINES}): split it by concern")
        if top in ("main", "lib"):
            continue
        used = set(re.findall(r"crate::(\w+)", without_unit_tests(text))) - {top}
        deps.setdefault(top, set()).update(used)
        for importer, forbidden in FORBIDDEN:
            if top == importer and forbidden in used:
                problems.append(f"{path}: imports crate::{forbidden} ({importer} must not depend on {forbidden})")
    if not deps:
        print(f"check_layout: no Rust modules under {src}")
        return 1
    reach = {m: set(d) for m, d in deps.items()}
    changed = True
    while changed:
        changed = False
        for module in reach:
            new = set().union(*(reach.get(d, set()) for d in reach[module])) - reach[module]
            if new:
                reach[module] |= new
                changed = True
    cycles = sorted({tuple(sorted((a, b))) for a in reach for b in reach[a] if a != b and a in reach.get(b, set())})
    problems += [f"import cycle: {a} <-> {b}" for a, b in cycles]
    crate = Crate(src)
    file_cycles = crate.cycles()
    problems += [f"import cycle between files: {' <-> '.join(group)}" for group in file_cycles]
    for problem in problems:
        print(problem)
    print(f"check_layout: {len(cycles)} import cycles among {len(deps)} top-level modules, "
          f"{len(file_cycles)} among {len(crate.files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
