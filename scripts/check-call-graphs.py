#!/usr/bin/env python3
"""Checks that rust-core has no cycles: neither between the C files of csrc/ nor between
the Rust modules of src/.

  scripts/check-call-graphs.py [PATH] [--edges]

PATH is the repository (or its rust-core/ directory); the default is the repository this
script is in. --edges prints both graphs' edges. The exit status is 1, and each cycle is
named, when either graph has one.

The C graph: file A -> file B when A uses (calls, or takes the address of) a function or
global variable that B defines without `static`. Definitions and uses are read after
comments, strings and preprocessor lines are removed and the files' own function-like
macros are expanded (store.c defines its PHP functions through one, module.c lists them
through another); shim.h's static inline helpers belong to no file.

The Rust graph: module A -> module B when A names a path into B: `use crate::…`,
`use super::…`, `use self::…`, a child module's name (`use context::…`), and the same
paths written inline in code (`crate::x::f()`, `super::T`), or after an alias a `use`
brought in (`use crate::runtime; runtime::info::X`). A path counts for the deepest module
it names. Every file and every inline `mod name { … }` is a module; modules under
`#[cfg(test)]` are test code, above every layer, and are left out. "A uses B, directly or
through others" holds for modules with their submodules too, so the graph is checked at
every depth of the module tree: at depth d each module stands for itself and everything
below it (depth 1: `request` and `runtime` are two nodes, `request::task` is part of the
first).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
C_KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "goto",
    "__typeof__", "typeof", "_Alignof", "__attribute__", "defined",
}


# ---- graphs ---------------------------------------------------------------------------

def find_cycles(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for each strongly connected component that has one (Tarjan), each as the
    list of its nodes in order, the first repeated at the end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def connect(v: str) -> None:
        nonlocal counter
        # Iterative: a deep chain must not hit Python's recursion limit.
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            advanced = False
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                components.append(component)

    for v in sorted(nodes):
        if v not in index:
            connect(v)

    cycles = []
    for component in components:
        members = set(component)
        if len(component) == 1 and component[0] not in edges.get(component[0], ()):
            continue
        # A shortest cycle through each member, each cycle once: every edge that closes
        # one shows up, not only the first found.
        found: set[frozenset[str]] = set()
        for start in sorted(component):
            cycle = shortest_cycle(start, members, edges)
            if frozenset(cycle) not in found:
                found.add(frozenset(cycle))
                cycles.append(cycle)
    return cycles


def shortest_cycle(start: str, members: set[str], edges: dict[str, set[str]]) -> list[str]:
    """The shortest way from start back to start inside members (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1] + [start]
                if w in members and w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


# ---- C --------------------------------------------------------------------------------

def c_strip(text: str) -> str:
    """The code without comments and string or character literals (each kept as an empty
    literal), lines joined where a backslash continues them."""
    text = text.replace("\\\n", " ")
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def c_macros(text: str) -> dict[str, tuple[list[str], str]]:
    """The function-like macros #defined in stripped text: name -> (parameters, body)."""
    macros = {}
    for m in re.finditer(rf"^[ \t]*#[ \t]*define[ \t]+({IDENT})\(([^)]*)\)(.*)$", text, re.M):
        params = [p.strip() for p in m.group(2).split(",") if p.strip()]
        macros[m.group(1)] = (params, m.group(3))
    return macros


def c_split_args(text: str, start: int) -> tuple[list[str], int] | None:
    """The comma-separated arguments of the parenthesis opening at text[start], and the
    index after its closing parenthesis."""
    depth, args, current = 0, [], []
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
            if depth == 1:
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args, i + 1
        elif c == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(c)
    return None


def c_expand(text: str, macros: dict[str, tuple[list[str], str]], depth: int = 0) -> str:
    """text with the given function-like macros expanded (## pastes tokens, # makes an
    empty string), nested invocations included."""
    if depth > 8 or not macros:
        return text
    pattern = re.compile(rf"\b({'|'.join(map(re.escape, macros))})\s*\(")
    out, pos = [], 0
    for m in pattern.finditer(text):
        if m.start() < pos:
            continue
        split = c_split_args(text, m.end() - 1)
        if split is None:
            continue
        args, end = split
        params, body = macros[m.group(1)]
        values = dict(zip(params, args))

        def substitute(t: re.Match) -> str:
            return values.get(t.group(0), t.group(0))

        expanded = re.sub(rf"(?<!#)#(?!#)\s*({IDENT})", lambda t: '""' if t.group(1) in values else t.group(0),
                          re.sub(r"\s*##\s*", "##", body))
        expanded = re.sub(IDENT, substitute, expanded).replace("##", "")
        out.append(text[pos:m.start()])
        out.append(" " + c_expand(expanded, macros, depth + 1) + " ")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def c_parse(path: Path) -> tuple[set[str], set[str], set[str]]:
    """(exported definitions, static definitions, identifiers used) of one .c file."""
    text = c_strip(path.read_text())
    macros = c_macros(text)
    # Preprocessor lines go; the file's own macros are expanded where they are invoked.
    code = re.sub(r"^[ \t]*#.*$", " ", text, flags=re.M)
    code = c_expand(code, macros)

    exported: set[str] = set()
    static: set[str] = set()
    depth = 0
    statement_start = 0
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                head = code[statement_start:i]
                m = re.search(rf"({IDENT})\s*\(([^()]|\([^()]*\))*\)\s*$", head)
                if m and "=" not in head and m.group(1) not in C_KEYWORDS:
                    # Its specifiers: what precedes the name, after any macro invocation
                    # written before it without a semicolon (module.c's arginfo blocks).
                    specifiers = head[:m.start()].rsplit(")", 1)[-1]
                    (static if re.search(r"\bstatic\b", specifiers) else exported).add(m.group(1))
                elif "=" in head and not re.search(r"\b(static|extern|typedef)\b", head):
                    # A global initialised with braces: `sapi_module_struct pw_sapi_module = {`.
                    v = re.search(rf"({IDENT})\s*(\[[^\]]*\])?\s*=\s*$", head)
                    if v:
                        exported.add(v.group(1))
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                statement_start = i + 1
        elif c == ";" and depth == 0:
            head = code[statement_start:i]
            # A global defined without braces: `type name;` or `type name = value;`, not a
            # prototype, a typedef or an extern declaration.
            if not re.search(r"\b(static|extern|typedef)\b", head) and "(" not in head.split("=")[0]:
                v = re.search(rf"({IDENT})\s*(\[[^\]]*\])?\s*(=.*)?$", head.strip(), re.S)
                if v and len(head.split("=")[0].split()) >= 2:
                    exported.add(v.group(1))
            statement_start = i + 1
    used = set(re.findall(IDENT, code))
    return exported, static, used


def c_graph(csrc: Path) -> tuple[list[str], dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    files = sorted(p.name for p in csrc.glob("*.c"))
    parsed = {name: c_parse(csrc / name) for name in files}
    owner: dict[str, str] = {}
    for name, (exported, _, _) in parsed.items():
        for symbol in exported:
            if symbol in owner:
                raise SystemExit(f"check-call-graphs: {symbol} is defined in {owner[symbol]} and {name}")
            owner[symbol] = name
    edges: dict[str, set[str]] = {name: set() for name in files}
    why: dict[tuple[str, str], set[str]] = {}
    for name, (exported, static, used) in parsed.items():
        for symbol in used - exported - static:
            target = owner.get(symbol)
            if target and target != name:
                edges[name].add(target)
                why.setdefault((name, target), set()).add(symbol)
    return files, edges, why


# ---- Rust -----------------------------------------------------------------------------

def rs_strip(text: str) -> str:
    """The code without comments, string, byte-string and character literals; lifetimes
    stay."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif (m := re.match(r'b?r(#*)"', text[i:i + 300])) and (i == 0 or not re.match(r"\w", text[i - 1])):
            close = '"' + m.group(1)
            end = text.find(close, i + m.end())
            i = n if end < 0 else end + len(close)
            out.append('""')
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not re.match(r"\w", text[i - 1]))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'":
            # A character literal ('a', '\n', '\u{1F600}', '\''), or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


class Module:
    def __init__(self, path: tuple[str, ...], file: Path):
        self.path = path            # ("runtime", "info"); () is the crate
        self.file = file
        self.code = ""              # its own code, without its inline submodules
        self.children: dict[str, tuple[str, ...]] = {}

    @property
    def name(self) -> str:
        return "crate" if not self.path else "::".join(self.path)


def rs_modules(src: Path) -> dict[tuple[str, ...], Module]:
    modules: dict[tuple[str, ...], Module] = {}

    def load(path: tuple[str, ...], file: Path) -> None:
        text = rs_strip(file.read_text())
        # mod.rs and lib.rs hold their children beside them; x.rs in x/.
        directory = file.parent if file.name in ("lib.rs", "mod.rs") else file.with_suffix("")
        scan(path, file, text, directory)

    def scan(path: tuple[str, ...], file: Path, text: str, directory: Path) -> None:
        module = Module(path, file)
        modules[path] = module
        own = []
        pos = 0
        for m in re.finditer(rf"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?\bmod\s+({IDENT})\s*([;{{])", text):
            if m.start() < pos:
                continue
            attributes, name, kind = m.group(1), m.group(2), m.group(3)
            test = re.search(r"cfg\s*\(\s*test\s*\)", attributes) is not None
            if kind == "{":
                end = matching_brace(text, m.end() - 1)
                body = text[m.end():end]
                own.append(text[pos:m.start()])
                pos = end + 1
                if not test:
                    module.children[name] = path + (name,)
                    scan(path + (name,), file, body, directory / name)
                continue
            if test:
                continue
            module.children[name] = path + (name,)
            for candidate in (directory / f"{name}.rs", directory / name / "mod.rs"):
                if candidate.exists():
                    load(path + (name,), candidate)
                    break
            else:
                raise SystemExit(f"check-call-graphs: no file for `mod {name}` in {file}")
        own.append(text[pos:])
        module.code = "".join(own)

    load((), src / "lib.rs")
    return modules


def rs_use_trees(tree: str, prefix: list[str]) -> list[tuple[list[str], str | None]]:
    """The leaves of a use tree: (path, name it binds or None for a glob)."""
    tree = tree.strip()
    leaves = []
    brace = tree.find("{")
    if brace >= 0 and tree.endswith("}"):
        head = [s for s in re.split(r"\s*::\s*", tree[:brace].strip().rstrip(":").strip()) if s]
        inner = tree[brace + 1:-1]
        depth, current = 0, []
        parts = []
        for c in inner:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if c == "," and depth == 0:
                parts.append("".join(current))
                current = []
            else:
                current.append(c)
        parts.append("".join(current))
        for part in parts:
            if part.strip():
                leaves += rs_use_trees(part, prefix + head)
        return leaves
    alias = None
    m = re.match(rf"(.*?)\s+as\s+({IDENT})$", tree, re.S)
    if m:
        tree, alias = m.group(1), m.group(2)
    segments = [s for s in re.split(r"\s*::\s*", tree) if s]
    path = prefix + segments
    if segments and segments[-1] == "*":
        return [(path[:-1], None)]
    if segments and segments[-1] == "self":
        path = path[:-1]
    name = alias or (path[-1] if path else None)
    return [(path, name)]


def rs_graph(src: Path) -> tuple[dict[tuple[str, ...], Module], dict[tuple[str, ...], set[tuple[str, ...]]]]:
    modules = rs_modules(src)

    def resolve(module: Module, segments: list[str],
                aliases: dict[str, tuple[str, ...]]) -> tuple[tuple[str, ...], list[str]] | None:
        """The deepest module a path names and the segments after it, or None when the
        path leaves the crate (std::, ext_php_rs::, a local name)."""
        if not segments:
            return None
        first, rest = segments[0], segments[1:]
        if first in ("crate", "$crate"):
            base: tuple[str, ...] = ()
        elif first == "super":
            base = module.path[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif first == "self":
            base = module.path
        elif first in module.children:
            base = module.children[first]
        elif first in aliases:
            base = aliases[first]
        else:
            return None
        while rest and base + (rest[0],) in modules:
            base, rest = base + (rest[0],), rest[1:]
        return base, rest

    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {path: set() for path in modules}
    for module in modules.values():
        code = module.code
        aliases: dict[str, tuple[str, ...]] = {}
        uses = [m.group(1) for m in re.finditer(r"\buse\s+([^;]*);", code)]
        # Twice: a `use` may name an alias that a later `use` brings in.
        for _ in range(2):
            for tree in uses:
                for path, bound in rs_use_trees(tree, []):
                    resolved = resolve(module, path, aliases)
                    if resolved is None:
                        continue
                    target, rest = resolved
                    if target != module.path:
                        edges[module.path].add(target)
                    if rest:
                        continue  # an item of the module, not the module itself
                    if bound is None:
                        aliases.update(modules[target].children)  # a glob brings them in
                    elif bound not in ("crate", "super", "self"):
                        aliases[bound] = target
        rest_of_code = re.sub(r"\buse\s+[^;]*;", " ", code)
        starts = sorted({"crate", "super", "self", *module.children, *aliases}, key=len, reverse=True)
        pattern = rf"(?<![\w:$])(\$crate|{'|'.join(starts)})((?:\s*::\s*{IDENT})+)"
        for m in re.finditer(pattern, rest_of_code):
            segments = [m.group(1)] + [s for s in re.split(r"\s*::\s*", m.group(2)) if s]
            resolved = resolve(module, segments, aliases)
            if resolved is not None and resolved[0] != module.path:
                edges[module.path].add(resolved[0])
    return modules, edges


def name(path: tuple[str, ...]) -> str:
    return "crate" if not path else "::".join(path)


# ---- main -----------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description="No cycles between csrc/*.c files nor between Rust modules.")
    parser.add_argument("path", nargs="?", default=str(Path(__file__).resolve().parent.parent),
                        help="the repository, or its rust-core/ directory")
    parser.add_argument("--edges", action="store_true", help="print both graphs' edges")
    args = parser.parse_args()
    root = Path(args.path)
    core = root if (root / "csrc").is_dir() else root / "rust-core"
    failed = False

    files, edges, why = c_graph(core / "csrc")
    if args.edges:
        print("C file graph (csrc/*.c; a -> b: a uses a function or global b defines):")
        for a in files:
            for b in sorted(edges[a]):
                print(f"  {a} -> {b}   ({', '.join(sorted(why[(a, b)]))})")
    for cycle in find_cycles(files, edges):
        failed = True
        steps = " -> ".join(cycle)
        print(f"C file cycle: {steps}")
        for a, b in zip(cycle, cycle[1:]):
            print(f"  {a} -> {b}: {', '.join(sorted(why[(a, b)]))}")

    modules, rs_edges = rs_graph(core / "src")
    if args.edges:
        print("Rust module graph (src/; a -> b: a names a path into b):")
        for a in sorted(rs_edges):
            for b in sorted(rs_edges[a]):
                print(f"  {name(a)} -> {name(b)}")
    depth = max(len(p) for p in modules)
    seen: set[frozenset[str]] = set()
    for level in range(1, depth + 1):
        # Each module stands for itself and its submodules below `level`.
        def up(path: tuple[str, ...]) -> str:
            return name(path[:level])
        nodes = sorted({up(p) for p in modules})
        collapsed: dict[str, set[str]] = {v: set() for v in nodes}
        for a, targets in rs_edges.items():
            for b in targets:
                if up(a) != up(b):
                    collapsed[up(a)].add(up(b))
        for cycle in find_cycles(nodes, collapsed):
            key = frozenset(cycle)
            if key in seen:
                continue
            seen.add(key)
            failed = True
            print(f"Rust module cycle (modules with their submodules, depth {level}): {' -> '.join(cycle)}")
            for a, b in zip(cycle, cycle[1:]):
                detail = sorted(f"{name(x)} -> {name(y)}" for x, targets in rs_edges.items() for y in targets
                                if up(x) == a and up(y) == b)
                print(f"  {a} -> {b}: {'; '.join(detail)}")

    if failed:
        return 1
    print(f"no cycles: {len(files)} C files, {len(modules)} Rust modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
