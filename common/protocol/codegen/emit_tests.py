"""Emits the generated round-trip tests: per API (and per data message), Fill() functions that give every field
present at a version a deterministic pseudo-random value, and a registration function that
lists one RoundTripCase per message and version (run by tests/unit/protocol/roundtrip_test.cc).
"""

from emit_cpp import Ctx, GENERATED_NOTE, _qcpp, _qualified, api_file_stem, data_file_stem

_INT_CPP = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
            "uint16": "uint16_t", "uint32": "uint32_t"}


def _value_expr(ctx, t):
    """An expression giving a fresh random non-null value of scalar type t."""
    k = t.kind
    if k in _INT_CPP:
        e = "g.Int<%s>()" % _INT_CPP[k]
        return "%s(%s)" % (t.strong, e) if t.strong else e
    return {"bool": "g.Bool()", "float64": "g.Double()", "uuid": "g.RandomUuid()",
            "string": "g.String()", "bytes": "g.RandomBytes()"}[k]


def _fill_stmt(ctx, f, t, acc, depth, optional):
    k = t.kind
    null_cond = ctx.nullable_cond(f)
    if optional:
        if k == "array":
            inner = _fill_stmt(ctx, f, t, "(*%s)" % acc, depth, False)
            return "if ((%s) && g.Null()) { %s.reset(); } else { %s.emplace(); %s }" % (
                null_cond, acc, acc, inner)
        if k == "struct":
            return "if ((%s) && g.Null()) { %s.reset(); } else { Fill(%s.emplace(), v, g); }" % (
                null_cond, acc, acc)
        return "if ((%s) && g.Null()) { %s.reset(); } else { %s = %s; }" % (
            null_cond, acc, acc, _value_expr(ctx, t))
    if k == "array":
        e = "e%d" % depth
        inner = _fill_stmt(ctx, f, t.element, e, depth + 1, False)
        return "%s.resize(g.Count()); for (auto& %s : %s) { %s }" % (acc, e, acc, inner)
    if k == "struct":
        return "Fill(%s, v, g);" % acc
    if k == "records":
        return ("if ((%s) && g.Null()) { %s.data.reset(); } else { %s.data = g.RandomBytes(); }"
                % (null_cond, acc, acc))
    return "%s = %s;" % (acc, _value_expr(ctx, t))


def _emit_fill(ctx, msg, st, out):
    q = _qualified(msg, st)
    out.append("void Fill(%s& m, int16_t v, FillRng& g) {" % q)
    for f in st.fields:
        c = ctx.cond(f.present())
        if c == "false":
            continue
        stmt = _fill_stmt(ctx, f, f.type, "m." + f.member, 1, f.is_optional())
        out.append("  if (%s) { %s }" % (c, stmt) if c != "true" else "  " + stmt)
    if not msg.flexible.empty:
        out.append("  if (%s) g.MaybeUnknownTags(&m.unknown_tagged_fields);" % ctx.flex_expr())
    out.append("  (void)v;")
    out.append("}")
    out.append("")


def emit_api_test(api_name, req, resp):
    return _emit_test("common/protocol/messages/%s.h" % api_file_stem(api_name), api_name,
                      (req, resp))


def emit_data_test(msg, subdir):
    """Round trip of a `data` message: api_key -1 and is_request false, so request-only users
    of the cases (the fuzz seed writer) skip it."""
    return _emit_test("common/protocol/%s/%s.h" % (subdir, data_file_stem(msg)), msg.name, (msg,))


def _emit_test(header, register_name, msgs):
    out = [GENERATED_NOTE.rstrip("\n"),
           '#include "%s"' % header,
           '#include "tests/unit/protocol/roundtrip.h"', "",
           "namespace runnel::protocol::testing {", "namespace {", ""]
    for msg in msgs:
        ctx = Ctx(msg)
        for st in msg.structs:
            out.append("void Fill(%s& m, int16_t v, FillRng& g);" % _qualified(msg, st))
    out.append("")
    for msg in msgs:
        ctx = Ctx(msg)
        for st in msg.structs:
            _emit_fill(ctx, msg, st, out)
    out.append("}  // namespace")
    out.append("")
    out.append("void Register%s(std::vector<RoundTripCase>& out) {" % register_name)
    for msg in msgs:
        out.append("  for (int16_t v = %s::kMinVersion; v <= %s::kMaxVersion; ++v) {" % (
            msg.name, msg.name))
        out.append('    out.push_back({"%s", %d, %s, v,' % (
            msg.name, -1 if msg.kind == "data" else msg.api_key,
            "true" if msg.kind == "request" else "false"))
        out.append("                   [](int16_t version, uint64_t seed) {")
        out.append("                     return RoundTrip<%s>(version, seed, &Fill);" % msg.name)
        out.append("                   },")
        out.append("                   [](int16_t version, uint64_t seed) {")
        out.append("                     return EncodeMessage<%s>(version, seed, &Fill);" % msg.name)
        out.append("                   }});")
        out.append("  }")
    out.append("}")
    out += ["", "}  // namespace runnel::protocol::testing", ""]
    return "\n".join(out)


def emit_registry(apis, data=()):
    """`data`: [(subdir, msg)] of the data messages, registered after the APIs."""
    names = [api_name for api_name, _, _ in apis] + [msg.name for _, msg in data]
    out = [GENERATED_NOTE.rstrip("\n"), '#include "tests/unit/protocol/roundtrip.h"', "",
           "namespace runnel::protocol::testing {", ""]
    for name in names:
        out.append("void Register%s(std::vector<RoundTripCase>& out);" % name)
    out += ["", "std::vector<RoundTripCase> AllRoundTripCases() {",
            "  std::vector<RoundTripCase> out;"]
    for name in names:
        out.append("  Register%s(out);" % name)
    out += ["  return out;", "}", "", "}  // namespace runnel::protocol::testing", ""]
    return "\n".join(out)
