#!/usr/bin/env python3
"""Checks that the manual at the top of gpuhal.h lists every configuration macro and every
environment variable gpuhal reads, and nothing that no longer exists.

The manual is the first /* ... */ comment of src/prologue.h. It has two lists:

    CONFIGURATION MACROS (define before including gpuhal.h)
    ENVIRONMENT VARIABLES

A section starts at a line (after the " * " of the comment) that begins with that heading,
case-insensitively, and ends at the next heading (a line with text in the heading column)
or at the end of the comment. An entry of a list is a line of its section indented by
exactly two spaces after " * " whose first word is the name: upper case with at least one
underscore (a macro may carry its parameters, as in GPUHAL_ASSERT(c)); continuation lines
(indented further) and prose lines are not entries. A name counts as documented only as an
entry of its own list, not where the manual merely mentions it.

What counts as read, in src/*.h and src/*.c (comments removed, backslash-continued lines joined):

  configuration macro  a GPUHAL_<X> name (one underscore: GPUHAL__<x> names are internal)
                       that appears in an #if, #ifdef, #ifndef, #elif, #elifdef or
                       #elifndef line, i.e. one whose definition by the user changes what
                       gpuhal compiles. That includes the defaults gpuhal defines inside
                       `#ifndef NAME` (the user may override them). Include guards and
                       other names the user must not define are in IGNORED_MACROS.

  environment variable a string literal that looks like a variable name (upper case,
                       digits, underscores) and is the first argument of getenv or
                       secure_getenv, or any argument of a reader: a function that passes
                       one of its parameters to getenv or to another reader (found to a
                       fixed point), e.g. gpuhal__getenv("GPUHAL_LOG") or
                       gpuhal__library_candidates(path, "GPUHAL_CUDA_LIBRARY",
                       "libcuda.so.1", ...). Also every string literal that is exactly a
                       GPUHAL_<X> name, wherever it appears, so that a name handed around
                       before it reaches a reader is not missed.

Fails (exit 1), one line per problem, when a name read in src is not an entry of its list,
or when an entry names something src no longer reads (stale). Otherwise prints one summary
line and exits 0.

    python3 tools/check_manual.py
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
MANUAL = "src/prologue.h"
ME = "tools/check_manual.py"

# Tested in #if lines but not for the user to define.
IGNORED_MACROS = {
    "GPUHAL_H",                    # include guard of gpuhal.h (src/prologue.h)
    "GPUHAL_IMPLEMENTATION_DONE",  # guard of the implementation half (tools/amalgamate.py)
    "GPUHAL_CUDA_API_H",           # include guard of src/cuda_api.h
}
# The include guards of src/ files (tools/amalgamate.py drops them).
IGNORED_PREFIX = "GPUHAL_SRC_"
# Environment variables that are not gpuhal's to document (none so far).
IGNORED_ENV = set()

MACRO_HEADING = "CONFIGURATION MACROS"
ENV_HEADING = "ENVIRONMENT VARIABLES"

TOKEN_RE = re.compile(
    r'//[^\n]*'                      # line comment
    r'|/\*.*?\*/'                    # block comment
    r'|"(?:\\.|[^"\\\n])*"'          # string literal
    r"|'(?:\\.|[^'\\\n])*'",         # character literal
    re.S)
CONDITIONAL_RE = re.compile(r'^\s*#\s*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b(.*)$')
USER_MACRO_RE = re.compile(r'\bGPUHAL_[A-Z0-9][A-Z0-9_]*\b')
ENV_NAME_RE = re.compile(r'^[A-Z_][A-Z0-9_]*$')
GPUHAL_LITERAL_RE = re.compile(r'"(GPUHAL_[A-Z0-9][A-Z0-9_]*)"')
IDENT = r'[A-Za-z_]\w*'
# A function definition header: `name(params) {` at the start of a line, after its type.
FUNC_DEF_RE = re.compile(r'^[A-Za-z_][\w \t\*]*?\b(' + IDENT + r')\s*\(([^;{}]*?)\)\s*\{', re.M)
ENTRY_RE = re.compile(r'^  ([A-Z][A-Z0-9]*_[A-Z0-9_]*)(?:\([^)]*\))?(?:\s|$)')


def strip_comments(text):
    """The text with every comment blanked (newlines kept, so line numbers hold)."""
    def blank(m):
        s = m.group(0)
        if s.startswith("/"):
            return re.sub(r'[^\n]', ' ', s)
        return s
    return TOKEN_RE.sub(blank, text)


def join_continuations(text):
    """Lines with backslash continuations joined, each with the number of its first line."""
    out = []
    pending, start = "", None
    for number, line in enumerate(text.split("\n"), 1):
        if start is None:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending, start = "", None
    return out


def call_args(code, open_paren):
    """The top-level argument strings of the call whose '(' is at open_paren."""
    depth, args, current, i = 0, [], [], open_paren
    while i < len(code):
        c = code[i]
        if c == '"' or c == "'":
            m = TOKEN_RE.match(code, i)
            if m:
                current.append(m.group(0))
                i = m.end()
                continue
        if c in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args
        elif c == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(c)
        i += 1
    return args


def functions(code):
    """(name, parameter names, body start, body end) of every function defined in code."""
    out = []
    for m in FUNC_DEF_RE.finditer(code):
        params = []
        for p in m.group(2).split(","):
            words = re.findall(IDENT, p)
            if words and words[-1] != "void":
                params.append(words[-1])
        depth, i = 0, m.end() - 1
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out.append((m.group(1), params, m.end(), i))
    return out


def calls(code, name):
    """(position, args) of every call of `name` in code."""
    out = []
    for m in re.finditer(r'\b' + re.escape(name) + r'\s*\(', code):
        out.append((m.start(), call_args(code, m.end() - 1)))
    return out


def scan(sources):
    """({macro: first file}, {variable: first file}) read by the sources {file: text}."""
    macros, env = {}, {}
    codes = {name: strip_comments(text) for name, text in sources.items()}
    for name, code in codes.items():
        for _, line in join_continuations(code):
            m = CONDITIONAL_RE.match(line)
            if not m:
                continue
            for macro in USER_MACRO_RE.findall(m.group(1)):
                if macro not in IGNORED_MACROS and not macro.startswith(IGNORED_PREFIX):
                    macros.setdefault(macro, name)
    # Readers: getenv, secure_getenv, and functions that pass a parameter to a reader.
    readers = {"getenv", "secure_getenv"}
    defs = [(f, params, code[b:e]) for code in codes.values() for f, params, b, e in functions(code)]
    changed = True
    while changed:
        changed = False
        for f, params, body in defs:
            if f in readers:
                continue
            for reader in list(readers):
                if any(a in params for _, args in calls(body, reader) for a in args):
                    readers.add(f)
                    changed = True
                    break
    for name, code in codes.items():
        for reader in sorted(readers):
            for _, args in calls(code, reader):
                if reader in ("getenv", "secure_getenv"):
                    args = args[:1]
                for a in args:
                    m = re.match(r'^"(.*)"$', a)
                    if m and ENV_NAME_RE.match(m.group(1)) and m.group(1) not in IGNORED_ENV:
                        env.setdefault(m.group(1), name)
        for value in GPUHAL_LITERAL_RE.findall(code):
            if value not in IGNORED_ENV:
                env.setdefault(value, name)
    return macros, env


def manual_lists(text):
    """({macro entries}, {environment entries}) of the manual comment in prologue.h."""
    m = re.search(r'/\*.*?\*/', text, re.S)
    if not m:
        return None, None
    lists = {MACRO_HEADING: set(), ENV_HEADING: set()}
    section = None
    for raw in m.group(0).split("\n"):
        body = re.sub(r'^\s*/?\*+/?', '', raw, count=1)
        body = body[1:] if body.startswith(" ") else body
        if body and not body[0].isspace():  # a heading
            section = None
            for heading in lists:
                if body.upper().startswith(heading):
                    section = heading
            continue
        e = ENTRY_RE.match(body)
        if section and e:
            lists[section].add(e.group(1))
    return lists[MACRO_HEADING], lists[ENV_HEADING]


def main():
    sources = {}
    for f in sorted(os.listdir(SRC)):
        if f.endswith((".h", ".c")):
            with open(os.path.join(SRC, f), encoding="utf-8") as fh:
                sources["src/" + f] = fh.read()
    macros, env = scan(sources)
    listed_macros, listed_env = manual_lists(sources.get(MANUAL, ""))
    if listed_macros is None:
        print("%s: %s has no manual comment" % (ME, MANUAL))
        return 1
    problems = []
    for found, listed, heading in ((macros, listed_macros, MACRO_HEADING), (env, listed_env, ENV_HEADING)):
        for name in sorted(set(found) - listed):
            problems.append("%s: %s is read in %s but not listed in the manual in %s"
                            % (ME, name, found[name], MANUAL))
        for name in sorted(listed - set(found)):
            problems.append("%s: %s is listed in the manual in %s (%s) but src/ no longer reads it"
                            % (ME, name, MANUAL, heading.lower()))
    if problems:
        for p in problems:
            print(p)
        return 1
    print("check_manual: %d macros, %d environment variables documented" % (len(macros), len(env)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
