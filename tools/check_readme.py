#!/usr/bin/env python3
"""Compiles every ```c block of README.md, so the README never shows code that does not build.

A block is compiled as its own translation unit with gpuhal.h, by the C compiler given
(gcc -std=c99 -Wall -Wextra -Wpedantic -Werror), and linked. A block that holds a whole
program (it defines main) is also run with --run (CTest runs it on softcuda) and must exit 0.
A block whose first line is `/* fragment */` is a piece of a function: it is wrapped in one,
after `#define GPUHAL_IMPLEMENTATION`, `#include "gpuhal.h"`, <stdio.h> and <string.h>.

    python3 tools/check_readme.py [--cc gcc] [--run] [--keep DIR]
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
FRAGMENT_PRELUDE = """#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include <stdio.h>
#include <string.h>
static void readme_fragment(void) {
"""
FRAGMENT_END = """
}
int main(void) {
  (void)readme_fragment; /* compiled and linked, not run: fragments need a real setup */
  return 0;
}
"""


def blocks(text):
    """(line number, code) of every ```c block."""
    out = []
    for m in re.finditer(r"^```c[ \t]*\n(.*?)^```[ \t]*$", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def main(argv):
    cc = "cc"
    run = "--run" in argv
    keep = None
    extra = []
    if "--cc" in argv:
        cc = argv[argv.index("--cc") + 1]
    if "--sanitize" in argv:  # match a sanitizer build (its softcuda needs the runtime)
        kind = argv[argv.index("--sanitize") + 1]
        if kind == "address":
            extra = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        elif kind == "thread":
            extra = ["-fsanitize=thread", "-fno-omit-frame-pointer"]
    if "--keep" in argv:
        keep = argv[argv.index("--keep") + 1]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        found = blocks(f.read())
    if not found:
        print("README.md has no ```c blocks")
        return 1
    work = keep or tempfile.mkdtemp(prefix="gpuhal-readme-")
    os.makedirs(work, exist_ok=True)
    failures = 0
    for i, (line, code) in enumerate(found):
        fragment = code.lstrip().startswith("/* fragment */")
        source = FRAGMENT_PRELUDE + code + FRAGMENT_END if fragment else code
        src = os.path.join(work, "block%d.c" % i)
        exe = os.path.join(work, "block%d" % i)
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        what = "README.md:%d (%s)" % (line, "fragment" if fragment else "program")
        cmd = [cc] + FLAGS + extra + ["-I", ROOT, src, "-o", exe, "-ldl", "-lpthread"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        if r.returncode != 0:
            print("FAIL %s does not compile:\n%s" % (what, r.stdout))
            failures += 1
            continue
        if run and not fragment and re.search(r"\bint\s+main\s*\(", code):
            r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                               timeout=120)
            if r.returncode != 0:
                print("FAIL %s exited %d:\n%s" % (what, r.returncode, r.stdout))
                failures += 1
                continue
            print("ok   %s compiles and runs: %s" % (what, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""))
        else:
            print("ok   %s compiles" % what)
    print("%d of %d README code blocks failed" % (failures, len(found)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
