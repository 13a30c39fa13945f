"""Parses Runnel's line-based schema files (see common/protocol/schema/README.md) into plain
dictionaries. No semantics here: types are resolved and checked by model.py."""

import json
import shlex


class SchemaError(Exception):
    pass


def _parse_attrs(tokens, where):
    attrs = {}
    for tok in tokens:
        if "=" in tok:
            key, value = tok.split("=", 1)
        else:
            key, value = tok, True
        if key in attrs:
            raise SchemaError("%s: attribute %r given twice" % (where, key))
        attrs[key] = value
    return attrs


def _tokenize(line, where):
    try:
        # shlex keeps quoted defaults (default="") together and unquotes them; an empty quoted
        # default must stay distinguishable from a missing one, so re-quote it.
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = list(lexer)
    except ValueError as e:
        raise SchemaError("%s: %s" % (where, e))
    # `default=""` comes back as `default=`: keep it as an explicit empty string.
    return [t + '""' if t.endswith("default=") else t for t in tokens]


def _unquote_default(attrs):
    d = attrs.get("default")
    if isinstance(d, str) and d == '""':
        attrs["default"] = ""
    return attrs


def parse(text, filename):
    """Returns {"kind", "name", "attrs", "fields", "structs"} where fields are nested
    {"name", "type", "attrs", "fields", "line"} dictionaries."""
    doc = None
    # Stack of (indent, children list) to attach fields to.
    stack = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = "%s:%d" % (filename, lineno)
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if "\t" in raw:
            raise SchemaError("%s: tabs are not allowed, indent with two spaces" % where)
        indent = len(raw) - len(raw.lstrip(" "))
        if indent % 2:
            raise SchemaError("%s: indentation must be a multiple of two spaces" % where)
        level = indent // 2
        tokens = _tokenize(raw.strip(), where)
        if level == 0:
            kind = tokens[0]
            if kind in ("request", "response", "header", "data"):
                if doc is not None:
                    raise SchemaError("%s: a file holds one message" % where)
                if len(tokens) < 2:
                    raise SchemaError("%s: message name missing" % where)
                doc = {"kind": kind, "name": tokens[1], "attrs": _parse_attrs(tokens[2:], where),
                       "fields": [], "structs": [], "line": where}
                stack = [(0, doc["fields"])]
            elif kind == "struct":
                if doc is None:
                    raise SchemaError("%s: struct before the message line" % where)
                if len(tokens) < 2:
                    raise SchemaError("%s: struct name missing" % where)
                st = {"name": tokens[1], "attrs": _parse_attrs(tokens[2:], where), "fields": [],
                      "line": where}
                doc["structs"].append(st)
                stack = [(0, st["fields"])]
            else:
                raise SchemaError("%s: expected request, response, header, data or struct" % where)
            continue
        if doc is None:
            raise SchemaError("%s: field before the message line" % where)
        # Pop to the parent at level-1.
        while stack and stack[-1][0] >= level:
            stack.pop()
        if not stack or stack[-1][0] != level - 1:
            raise SchemaError("%s: unexpected indentation" % where)
        if len(tokens) < 2:
            raise SchemaError("%s: a field needs a name and a type" % where)
        field = {"name": tokens[0], "type": tokens[1],
                 "attrs": _unquote_default(_parse_attrs(tokens[2:], where)), "fields": [],
                 "line": where}
        stack[-1][1].append(field)
        stack.append((level, field["fields"]))
    if doc is None:
        raise SchemaError("%s: no message in file" % filename)
    return doc


def parse_file(path):
    with open(path, encoding="utf-8") as fh:
        return parse(fh.read(), path)


if __name__ == "__main__":
    import sys
    for p in sys.argv[1:]:
        print(json.dumps(parse_file(p), indent=1))
