"""The clang build directory that scripts/tidy and scripts/thread-safety-check read.

It is configured only (CMake with clang, compile_commands.json, no precompiled headers, which
clang-tidy would need built) plus the generated headers every source includes (the Kafka codec
and the protobuf/gRPC ones); nothing is compiled. Imported by those two scripts.
"""

import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "build", "tidy")
# The sources checked: the ones git tracks, in these folders.
SOURCE_DIRS = ("brokerd", "common", "controllerd", "storaged", "supervisor", "tests", "bench")


def run(cmd, **kwargs):
    print("+ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def prepare(build_dir):
    """Configures `build_dir` with clang when needed and generates the headers sources include."""
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache) as f:
            m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", f.read(), re.M)
        if not m or "clang" not in os.path.basename(m.group(1)):
            sys.exit(f"{build_dir} is configured with {m.group(1) if m else '?'}, not clang: "
                     "remove it or name another --build-dir")
    else:
        env = dict(os.environ, CC="clang", CXX="clang++")
        run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Debug",
             "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON",
             "-DRUNNEL_TESTS=ON"], env=env, stdout=subprocess.DEVNULL)
    # Re-runs CMake itself when a CMakeLists.txt changed, which rewrites compile_commands.json.
    run(["ninja", "-C", build_dir, "runnel_protocol_generated", "runnel_proto_generated"],
        stdout=subprocess.DEVNULL)


def compile_commands(build_dir):
    """{path relative to ROOT: compile_commands.json entry} for the tracked sources."""
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    tracked = set(git("ls-files", "*.cc"))
    out = {}
    for e in entries:
        rel = os.path.relpath(os.path.join(e["directory"], e["file"]), ROOT)
        if rel in tracked and rel.split("/")[0] in SOURCE_DIRS:
            out[rel] = e
    return out


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True,
                          text=True).stdout.split()


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    """The project files `path` includes with quotes (paths relative to ROOT)."""
    try:
        with open(os.path.join(ROOT, path), errors="replace") as f:
            return [p for p in _INCLUDE.findall(f.read()) if os.path.exists(os.path.join(ROOT, p))]
    except OSError:
        return []


def closure(path):
    """`path` and every project file it includes, directly or not."""
    seen = set()
    pending = [path]
    while pending:
        f = pending.pop()
        if f not in seen:
            seen.add(f)
            pending.extend(includes(f))
    return seen


def includers(targets, files):
    """Those of `files` that include one of `targets`, directly or through other headers."""
    graph = {}
    pending = list(files)
    while pending:
        f = pending.pop()
        if f in graph:
            continue
        graph[f] = includes(f)
        pending.extend(graph[f])
    reaches = set(targets)
    changed = True
    while changed:
        changed = False
        for f, incs in graph.items():
            if f not in reaches and any(i in reaches for i in incs):
                reaches.add(f)
                changed = True
    return [f for f in files if f in reaches]
