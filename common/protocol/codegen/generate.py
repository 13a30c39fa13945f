#!/usr/bin/env python3
"""Generates the Kafka codec (and optionally its round-trip tests) from schema files.

  generate.py --schema-dir DIR --out-dir DIR [--tests-out-dir DIR] [--list-outputs]

--out-dir receives common/protocol/{api_keys.h,api_keys.cc,messages.h,messages/*.{h,cc}}
relative paths (pass ${CMAKE_BINARY_DIR}), plus common/protocol/<subdir>/<message>.{h,cc} for
the `data` messages of schema subdirectories (schema/coordinator/ -> common/protocol/coordinator/).
Files are rewritten only when their text changes, so an edit to one schema recompiles one API.
"""

import argparse
import os
import re
import sys

# Run from the build: never leave __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import emit_cpp  # noqa: E402
import emit_tests  # noqa: E402
import model  # noqa: E402
from schema_parser import SchemaError  # noqa: E402


def load_apis(schema_dir):
    """Returns [(api_name, request, response)] ordered by API key."""
    requests, responses = {}, {}
    for name in sorted(os.listdir(schema_dir)):
        if not name.endswith(".schema"):
            continue
        msg = model.load(os.path.join(schema_dir, name))
        if name != msg.name + ".schema":
            raise SchemaError("%s: file must be named %s.schema" % (name, msg.name))
        if msg.kind == "request":
            requests[msg.api_name] = msg
        elif msg.kind == "response":
            responses[msg.api_name] = msg
    apis = []
    keys = {}
    for api_name, req in requests.items():
        resp = responses.get(api_name)
        if resp is None:
            raise SchemaError("%sRequest has no %sResponse" % (api_name, api_name))
        if req.api_key != resp.api_key:
            raise SchemaError("%s: request and response keys differ" % api_name)
        if (req.lo, req.hi) != (resp.lo, resp.hi):
            raise SchemaError("%s: request and response version ranges differ" % api_name)
        if req.api_key in keys:
            raise SchemaError("API key %d used by %s and %s" % (req.api_key, keys[req.api_key],
                                                                api_name))
        keys[req.api_key] = api_name
        apis.append((api_name, req, resp))
    for api_name in responses:
        if api_name not in requests:
            raise SchemaError("%sResponse has no %sRequest" % (api_name, api_name))
    apis.sort(key=lambda a: a[1].api_key)
    return apis


def load_data(schema_dir, apis=()):
    """Returns [(subdir, message)] of the `data` messages, ordered by subdir and name. They live
    in subdirectories of the schema dir (schema/coordinator/*.schema -> common/protocol/
    coordinator/); a data message in the schema dir itself goes to common/protocol/data/."""
    taken = set()
    for api_name, req, resp in apis:
        taken.update((api_name, req.name, resp.name))
    found = []
    for entry in sorted(os.listdir(schema_dir)):
        path = os.path.join(schema_dir, entry)
        if entry.endswith(".schema") and os.path.isfile(path):
            msg = model.load(path)
            if msg.kind == "data":
                found.append(("data", entry, msg))
        elif os.path.isdir(path) and not entry.startswith((".", "_")):
            if not _SUBDIR_RE.match(entry) or entry in ("messages", "data"):
                raise SchemaError("%s: a schema subdirectory is named like a C++ path part, "
                                  "not messages/data" % path)
            for name in sorted(os.listdir(path)):
                if not name.endswith(".schema"):
                    continue
                msg = model.load(os.path.join(path, name))
                if msg.kind != "data":
                    raise SchemaError("%s/%s: only data messages go in subdirectories"
                                      % (entry, name))
                found.append((entry, name, msg))
    out = []
    for subdir, name, msg in found:
        if name != msg.name + ".schema":
            raise SchemaError("%s: file must be named %s.schema" % (name, msg.name))
        if msg.name in taken:
            raise SchemaError("%s: the name %s is used twice" % (name, msg.name))
        taken.add(msg.name)
        out.append((subdir, msg))
    return out


_SUBDIR_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def codec_outputs(apis, data=()):
    files = {}
    base = "common/protocol/"
    for subdir, msg in data:
        stem = emit_cpp.data_file_stem(msg)
        files[base + "%s/%s.h" % (subdir, stem)] = lambda d=subdir, m=msg: \
            emit_cpp.emit_data_header(m, d)
        files[base + "%s/%s.cc" % (subdir, stem)] = lambda d=subdir, m=msg: \
            emit_cpp.emit_data_source(m, d)
    for api_name, req, resp in apis:
        stem = emit_cpp.api_file_stem(api_name)
        files[base + "messages/%s.h" % stem] = lambda a=api_name, q=req, s=resp: \
            emit_cpp.emit_api_header(a, q, s)
        files[base + "messages/%s.cc" % stem] = lambda a=api_name, q=req, s=resp: \
            emit_cpp.emit_api_source(a, q, s)
    files[base + "api_keys.h"] = lambda: emit_cpp.emit_api_keys_header(apis)
    files[base + "api_keys.cc"] = lambda: emit_cpp.emit_api_keys_source(apis)
    files[base + "messages.h"] = lambda: emit_cpp.emit_umbrella(apis)
    return files


def test_outputs(apis, data=()):
    files = {}
    for subdir, msg in data:
        files["roundtrip_%s_%s.cc" % (subdir, emit_cpp.data_file_stem(msg))] = \
            lambda d=subdir, m=msg: emit_tests.emit_data_test(m, d)
    for api_name, req, resp in apis:
        stem = emit_cpp.api_file_stem(api_name)
        files["roundtrip_%s.cc" % stem] = lambda a=api_name, q=req, s=resp: \
            emit_tests.emit_api_test(a, q, s)
    files["roundtrip_registry.cc"] = lambda: emit_tests.emit_registry(apis, data)
    return files


def write_if_changed(path, text):
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--schema-dir", required=True)
    ap.add_argument("--out-dir")
    ap.add_argument("--tests-out-dir")
    ap.add_argument("--list-outputs", action="store_true",
                    help="print the files that would be written, one per line, and exit")
    args = ap.parse_args()
    try:
        apis = load_apis(args.schema_dir)
        data = load_data(args.schema_dir, apis)
    except SchemaError as e:
        sys.stderr.write("schema error: %s\n" % e)
        return 1
    jobs = {}
    if args.out_dir:
        for rel, fn in codec_outputs(apis, data).items():
            jobs[os.path.join(args.out_dir, rel)] = fn
    if args.tests_out_dir:
        for rel, fn in test_outputs(apis, data).items():
            jobs[os.path.join(args.tests_out_dir, rel)] = fn
    if args.list_outputs:
        print(";".join(sorted(jobs)))
        return 0
    for path, fn in sorted(jobs.items()):
        write_if_changed(path, fn())
    return 0


if __name__ == "__main__":
    sys.exit(main())
