"""The import graph between the Rust files of src/, for the layout check.

A file depends on another when it names one of that file's items: `crate::a::b::Item`,
`super::b::Item`, `self::b::Item`, in `use` trees or in code. `mod` declarations and `pub use`
re-exports (a folder's front door) are not dependencies themselves; a path through a
re-export is followed to the file that defines the item. Unit tests (`#[cfg(test)] mod tests`
blocks and `*_tests.rs` / `tests.rs` files) are left out: a test may use anything.
"""
import os
import re

USE_RE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([\w:{][^;]*);", re.S)
PATH_RE = re.compile(r"\b((?:crate|super|self)(?:::\w+)+)")
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)


def strip_tests(text):
    text = re.sub(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod tests\s*\{.*", "", text, flags=re.S)
    text = re.sub(r"#\[cfg\(test\)\]\s*(?:#\[path[^\]]*\]\s*)?mod \w+\s*;", "", text)
    return re.sub(r"//[^\n]*", "", text)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in filter(None, parts):
        for sub in expand_use(part):
            out.append(prefix + sub if sub != "self" else prefix.rstrip(":"))
    return out


class Crate:
    """The files of one crate's src/ with their module paths, re-exports and dependencies."""

    def __init__(self, src):
        self.src = src
        self.files = {}  # module path (tuple) -> file
        self.texts = {}
        for root, _, names in os.walk(src):
            for name in sorted(names):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(root, name)
                rel = os.path.relpath(path, src)[:-3].split(os.sep)
                if rel[-1] == "mod" or rel == ["lib"] or rel == ["main"]:
                    rel = rel[:-1]
                if rel[-1:] == ["tests"] or (rel and rel[-1].endswith("_tests")):
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    self.texts[tuple(rel)] = strip_tests(f.read())
                self.files.setdefault(tuple(rel), path)
        self.reexports = {m: self._reexports(m) for m in self.files}

    def _reexports(self, module):
        names = {}
        for match in USE_RE.finditer(self.texts[module]):
            if not match.group(1):
                continue
            for path in expand_use(match.group(2)):
                target = self._absolute(module, path.split("::"))
                if target is not None:
                    alias = path.split("::")[-1]
                    names[alias] = target
        return names

    def _absolute(self, module, segments):
        """Absolute segments of a path written in `module`; None for another crate's path."""
        here = list(module)
        if segments[0] not in ("crate", "super", "self"):
            if tuple(here) + (segments[0],) not in self.files:
                return None
            segments = ["self"] + segments
        if segments[0] == "crate":
            here, segments = [], segments[1:]
        while segments and segments[0] in ("super", "self"):
            if segments[0] == "super":
                here = here[:-1]
            segments = segments[1:]
        return tuple(here + segments) if segments else tuple(here)

    def resolve(self, path, seen=()):
        """The file defining what `path` (absolute segments) names, following re-exports."""
        module = ()
        for i, segment in enumerate(path):
            if module + (segment,) in self.files:
                module += (segment,)
                continue
            target = self.reexports.get(module, {}).get(segment)
            if target and target not in seen and target != module + (segment,):
                return self.resolve(target + tuple(path[i + 1 :]), seen + (target,))
            break
        return module

    def dependencies(self, module):
        text = self.texts[module]
        found = set()
        for match in USE_RE.finditer(text):
            if match.group(1):
                continue
            for path in expand_use(match.group(2)):
                found.add(self._absolute(module, path.split("::")))
        found.discard(None)
        code = USE_RE.sub("", text)
        for match in PATH_RE.finditer(code):
            found.add(self._absolute(module, match.group(1).split("::")))
        deps = {self.resolve(p) for p in found}
        return {d for d in deps if d != module and d in self.files and d != ()}

    def cycles(self):
        """Groups of files that import each other (strongly connected, more than one file)."""
        graph = {m: self.dependencies(m) for m in self.files}
        index, low, stack, on, groups = {}, {}, [], set(), []

        def visit(node):
            index[node] = low[node] = len(index)
            stack.append(node)
            on.add(node)
            for nxt in graph[node]:
                if nxt not in index:
                    visit(nxt)
                    low[node] = min(low[node], low[nxt])
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(self.files[m] for m in group))

        for node in sorted(graph):
            if node not in index:
                visit(node)
        return sorted(groups)
