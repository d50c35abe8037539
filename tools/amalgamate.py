#!/usr/bin/env python3
"""Writes gpuhal.h from the modules in src/.

Each module is one file in src/, listed in MODULES in amalgamation order. A module
may hold two halves separated by a line that is exactly

    /* ---- gpuhal:implementation ---- */

Everything above it is the module's public declarations; everything below it is its
implementation. The amalgamation puts every declarations half (in order) inside the
`GPUHAL_H` guard and every implementation half (in order) inside the
`GPUHAL_IMPLEMENTATION` guard. A module listed in IMPL_ONLY goes wholly into the
implementation half. `#include "x.h"` of a file in src/ is inlined once, where it
first appears; system includes (`#include <...>`) are left alone. A module may include
an earlier module (a no-op: it is already in) or a fragment that is not a module (e.g.
the generated builtin_ptx.h), never a later module: that fails, naming both.

    python3 tools/amalgamate.py           # write gpuhal.h (only when it changed)
    python3 tools/amalgamate.py --check   # exit 1 with a one-line reason if gpuhal.h is stale
    python3 tools/amalgamate.py --lines --output build/gpuhal.h
        # with #line directives, so that compilers and debuggers name src/ files and
        # lines (a development build: the committed gpuhal.h never has them)
"""
import hashlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
OUT = os.path.join(ROOT, "gpuhal.h")

MODULES = [
    "base.h",
    "hash.h",
    "cuda_api.h",
    "symbols.h",
    "status.h",
    "device.h",
    "memory.h",
    "event_pool.h",
    "semaphore.h",
    "queue.h",
    "queue_issue.h",
    "queue_progress.h",
    "queue_submit.h",
    "queue_state.h",
    "module_image.h",
    "disk_cache.h",
    "module_cache.h",
    "executable.h",
    "builtin_kernels.h",
    "command_buffer.h",
    "command_buffer_graph.h",
    "command_buffer_stream.h",
    "command_buffer_record.h",
    "queue_execute.h",
    "channel.h",
    "trace.h",
    "hooks.h",
]
IMPL_ONLY = {"hooks.h", "builtin_kernels.h", "command_buffer_graph.h", "command_buffer_stream.h", "command_buffer_record.h",
             "queue_execute.h", "hash.h", "module_image.h", "disk_cache.h", "cuda_api.h", "symbols.h", "queue_issue.h", "queue_progress.h", "queue_submit.h", "queue_state.h"}
SPLIT = "/* ---- gpuhal:implementation ---- */"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def read(name):
    with open(os.path.join(SRC, name), encoding="utf-8") as f:
        return f.read()


def version():
    text = read("prologue.h")
    parts = []
    for key in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"#define GPUHAL_VERSION_%s (\d+)" % key, text)
        if not m:
            sys.exit("amalgamate: src/prologue.h lacks GPUHAL_VERSION_%s" % key)
        parts.append(m.group(1))
    return ".".join(parts)


class Amalgamation:
    """Inlines src/ files; with `lines`, marks where each piece came from."""

    def __init__(self, lines):
        self.lines = lines
        self.seen = set(["prologue.h", "epilogue.h"])

    def mark(self, name, line):
        return '#line %d "src/%s"\n' % (line, name) if self.lines else ""

    def inline(self, text, name, first_line):
        """`text` is `name`'s content from its line `first_line` on."""
        out = [self.mark(name, first_line)]
        for number, line in enumerate(text.splitlines(keepends=True), first_line):
            m = INCLUDE_RE.match(line)
            if m and os.path.exists(os.path.join(SRC, m.group(1))):
                included = m.group(1)
                if included in MODULES and name in MODULES and MODULES.index(included) > MODULES.index(name):
                    sys.exit("amalgamate: src/%s:%d includes %s, a module later in the order (tools/amalgamate.py "
                             "MODULES): call up the order through a hook instead" % (name, number, included))
                if included not in self.seen:
                    self.seen.add(included)
                    out.append(self.inline(read(included), included, 1))
                    out.append(self.mark(name, number + 1))
                continue
            out.append(line)
        return "".join(out)


def split_module(name):
    """(declarations, implementation, the implementation's first line)."""
    text = read(name)
    if name in IMPL_ONLY:
        return "", text, 1
    if SPLIT in text:
        decl, impl = text.split(SPLIT, 1)
        return decl, impl, decl.count("\n") + 1
    return text, "", 1


def source_files():
    names = ["prologue.h", "epilogue.h"] + MODULES
    extra = sorted(f for f in os.listdir(SRC) if f.endswith(".h") and f not in names)
    return names + extra


def source_hash():
    h = hashlib.sha256()
    for name in source_files():
        path = os.path.join(SRC, name)
        if os.path.exists(path):
            h.update(name.encode())
            h.update(read(name).encode())
    return h.hexdigest()[:16]


def build(lines=False):
    am = Amalgamation(lines)
    decls, impls = [], []
    for name in MODULES:
        if not os.path.exists(os.path.join(SRC, name)):
            continue
        am.seen.add(name)
        decl, impl, impl_line = split_module(name)
        tag = "/* ==== module %s ==== */\n" % name[:-2]
        if decl.strip():
            decls.append(tag + am.inline(decl, name, 1))
        if impl.strip():
            impls.append(tag + am.inline(impl, name, impl_line))
    prologue = am.inline(read("prologue.h"), "prologue.h", 1)
    epilogue = am.inline(read("epilogue.h"), "epilogue.h", 1)
    prov = "/* gpuhal.h %s - generated by tools/amalgamate.py from src/ (sources %s). Do not edit. */\n" % (
        version(), source_hash())
    return "".join([
        prov,
        prologue,
        "\n".join(decls),
        "\n#ifdef __cplusplus\n}\n#endif\n#endif /* GPUHAL_H */\n\n",
        "#if defined(GPUHAL_IMPLEMENTATION) && !defined(GPUHAL_IMPLEMENTATION_DONE)\n",
        "#define GPUHAL_IMPLEMENTATION_DONE\n",
        "/* Internal helpers are static; a configuration may leave some unused. */\n",
        "#pragma GCC diagnostic push\n",
        "#pragma GCC diagnostic ignored \"-Wunused-function\"\n",
        "\n".join(impls),
        "\n#pragma GCC diagnostic pop\n",
        "#endif /* GPUHAL_IMPLEMENTATION */\n",
        epilogue,
    ])


def main(argv):
    out = OUT
    if "--output" in argv:
        i = argv.index("--output")
        if i + 1 >= len(argv):
            sys.exit("amalgamate: --output needs a path")
        out = argv[i + 1]
    text = build(lines="--lines" in argv)
    if "--check" in argv:
        if not os.path.exists(OUT):
            print("gpuhal.h is missing: run python3 tools/amalgamate.py")
            return 1
        with open(OUT, encoding="utf-8") as f:
            current = f.read()
        if current != text:
            first = current.splitlines()[0] if current else ""
            print("gpuhal.h is stale (%s; src/ now hashes to %s): run python3 tools/amalgamate.py"
                  % (first[:80], source_hash()))
            return 1
        print("gpuhal.h is up to date")
        return 0
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            if f.read() == text:
                return 0  # unchanged: leave its time stamp alone (no rebuild)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
