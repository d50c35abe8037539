#!/usr/bin/env python3
"""Writes gpuhal.h from the compilation units in src/.

src/ is a C library in SQLite's style: each module is a header and one or more
implementation files (listed in MODULES, in amalgamation order), and every file includes
what it uses, so each .c compiles on its own (tools/check_units.sh). A header holds two
halves separated by a line that is exactly

    /* ---- gpuhal:internal ---- */

Above it: the module's public declarations. Below it: what other files of the
implementation need of it (internal types, macros, GPUHAL__PRIVATE prototypes).

gpuhal.h is prologue.h, every header's public half (in order) inside the `GPUHAL_H` guard,
then, inside the `GPUHAL_IMPLEMENTATION` guard, every header's internal half and every .c
file (in order), then epilogue.h. Include guards (GPUHAL_SRC_*) and `#include "x.h"` of a
module's header are dropped (every header is in, once); `#include` of a src/ file that is
no module's (e.g. the generated builtin_ptx.h) is inlined where it first appears; system
includes (`#include <...>`) stay. A file may include only headers of its own module or of
earlier ones: including a later one fails, naming both (call up the order through the
hooks table, device.h, instead).

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

# (header, the implementation files it declares), in amalgamation order. A module may call
# only modules before it (and itself); calls up the order go through the hooks table.
MODULES = [
    ("base.h", []),  # the public half of base: statuses, timeouts, the allocator, logging
    ("internal.h", ["base.c"]),  # base's internal half: what every module stands on
    ("hash.h", ["hash.c"]),
    ("cuda_api.h", []),
    ("symbols.h", ["symbols.c"]),
    ("status.h", ["status.c"]),
    ("device.h", ["device.c"]),
    ("memory.h", ["memory.c", "memory_shared.c"]),
    ("event_pool.h", ["event_pool.c"]),
    ("semaphore.h", ["semaphore.c", "semaphore_shared.c"]),
    ("queue.h", ["queue.c", "queue_issue.c", "queue_progress.c", "queue_submit.c", "queue_state.c"]),
    ("module_image.h", ["module_image.c"]),
    ("disk_cache.h", ["disk_cache.c"]),
    ("module_cache.h", ["module_cache.c", "module_library.c"]),
    ("executable.h", ["executable.c", "executable_compile.c"]),
    ("builtin_kernels.h", ["builtin_kernels.c"]),
    ("command_buffer.h", ["command_buffer.c", "command_buffer_graph.c", "command_buffer_stream.c",
                          "command_buffer_launch.c", "command_buffer_tensor_map.c", "command_buffer_condition.c",
                          "command_buffer_record.c"]),
    ("queue_execute.h", ["queue_execute.c", "queue_report.c"]),
    ("channel.h", ["channel.c"]),
    ("trace.h", ["trace.c"]),
    (None, ["hooks.c"]),  # the hooks table: binds every module's hooks, so it comes last
]
FRAME = ["prologue.h", "epilogue.h"]
MARK = "/* ---- gpuhal:internal ---- */"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
GUARD_RE = re.compile(r"^#(ifndef|define|endif)\b.*\bGPUHAL_SRC_\w+")


def fail(message):
    sys.exit("amalgamate: " + message)


def read(name):
    with open(os.path.join(SRC, name), encoding="utf-8") as f:
        return f.read()


def module_index():
    """file name -> index of its module in MODULES."""
    index = {}
    for i, (header, sources) in enumerate(MODULES):
        for name in ([header] if header else []) + sources:
            index[name] = i
    return index


def version():
    text = read("prologue.h")
    parts = []
    for key in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"#define GPUHAL_VERSION_%s (\d+)" % key, text)
        if not m:
            fail("src/prologue.h lacks GPUHAL_VERSION_%s" % key)
        parts.append(m.group(1))
    return ".".join(parts)


class Amalgamation:
    """Inlines src/ files; with `lines`, marks where each piece came from."""

    def __init__(self, lines):
        self.lines = lines
        self.index = module_index()
        self.fragments = set()

    def mark(self, name, line):
        return '#line %d "src/%s"\n' % (line, name) if self.lines else ""

    def inline(self, text, name, first_line):
        """`text` is `name`'s content from its line `first_line` on, without its module
        includes and include guard."""
        out = [self.mark(name, first_line)]
        skipped = False
        for number, line in enumerate(text.splitlines(keepends=True), first_line):
            m = INCLUDE_RE.match(line)
            if m:
                included = m.group(1)
                if not os.path.exists(os.path.join(SRC, included)):
                    fail("src/%s:%d includes %s, which is not in src/" % (name, number, included))
                if included in self.index:
                    if included.endswith(".c"):
                        fail("src/%s:%d includes %s: include headers only" % (name, number, included))
                    if name in self.index and self.index[included] > self.index[name]:
                        fail("src/%s:%d includes %s, a module later in the order (tools/amalgamate.py MODULES): "
                             "call up the order through a hook instead" % (name, number, included))
                    skipped = True
                    continue
                if included in FRAME:
                    skipped = True
                    continue
                if included not in self.fragments:
                    self.fragments.add(included)
                    out.append(self.inline(read(included), included, 1))
                skipped = True
                continue
            if GUARD_RE.match(line):
                skipped = True
                continue
            if skipped:
                out.append(self.mark(name, number))
                skipped = False
            out.append(line)
        return "".join(out)


def leading_comment(text):
    """(the file's leading comment, the rest); the comment is '' when there is none."""
    if not text.startswith("/*"):
        return "", text
    end = text.index("*/") + 2
    if text[end:end + 1] == "\n":
        end += 1
    return text[:end], text[end:]


def split_header(name):
    """(public text, its first line, internal text, its first line) of a header; the
    header's leading comment goes with its public half, or with its internal half when
    the public one is empty."""
    text = read(name)
    if MARK not in text:
        fail("src/%s has no %s line (everything above it is public, everything below internal)" % (name, MARK))
    comment, _ = leading_comment(text)
    public, internal = text.split(MARK, 1)
    internal_line = public.count("\n") + 1
    body = public[len(comment):]
    has_public = any(line.strip() and not INCLUDE_RE.match(line) and not GUARD_RE.match(line)
                     for line in body.splitlines())
    if has_public:
        return public, 1, internal, internal_line
    return "", 1, comment + "\n" * (internal_line - 1 - comment.count("\n")) + internal, 1


def source_files():
    names = list(FRAME)
    for header, sources in MODULES:
        names += ([header] if header else []) + sources
    listed = set(names)
    extra = sorted(f for f in os.listdir(SRC) if f.endswith((".h", ".c")) and f not in listed)
    for f in extra:
        if f.endswith(".c"):
            fail("src/%s is in no module: add it to MODULES in tools/amalgamate.py" % f)
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
    source_files()  # fails on a .c that no module lists
    publics, internals, sources = [], [], []
    for header, files in MODULES:
        if header:
            public, public_line, internal, internal_line = split_header(header)
            for half, line, into in ((public, public_line, publics), (internal, internal_line, internals)):
                text = am.inline(half, header, line).strip("\n")
                if any(l.strip() and not l.startswith("#line ") for l in text.splitlines()):
                    into.append("/* ==== %s ==== */\n" % header + text + "\n")
        for name in files:
            sources.append("/* ==== %s ==== */\n" % name + am.inline(read(name), name, 1).strip("\n") + "\n")
    comment, rest = leading_comment(read("prologue.h"))
    prologue = comment + "#ifndef GPUHAL_H\n#define GPUHAL_H\n" + am.inline(rest, "prologue.h", comment.count("\n") + 1)
    epilogue = am.inline(read("epilogue.h"), "epilogue.h", 1)
    prov = "/* gpuhal.h %s - generated by tools/amalgamate.py from src/ (sources %s). Do not edit. */\n" % (
        version(), source_hash())
    return "".join([
        prov,
        prologue,
        '\n#ifdef __cplusplus\nextern "C" {\n#endif\n\n',
        "\n".join(publics),
        "\n#ifdef __cplusplus\n}\n#endif\n#endif /* GPUHAL_H */\n\n",
        "#if defined(GPUHAL_IMPLEMENTATION) && !defined(GPUHAL_IMPLEMENTATION_DONE)\n",
        "#define GPUHAL_IMPLEMENTATION_DONE\n",
        "/* Internal helpers are static; a configuration may leave some unused. */\n",
        "#pragma GCC diagnostic push\n",
        "#pragma GCC diagnostic ignored \"-Wunused-function\"\n",
        "\n".join(internals),
        "\n",
        "\n".join(sources),
        "\n#pragma GCC diagnostic pop\n",
        "#endif /* GPUHAL_IMPLEMENTATION */\n",
        epilogue,
    ])


def main(argv):
    out = OUT
    if "--output" in argv:
        i = argv.index("--output")
        if i + 1 >= len(argv):
            fail("--output needs a path")
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
