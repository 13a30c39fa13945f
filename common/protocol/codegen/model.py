"""The checked model of a schema file: versions, types, fields, structs, messages.

parse (schema_parser) -> model (this file) -> emit (emit_cpp, emit_tests). Everything the
emitters need to know about Kafka's semantics (what a default is, when a field is present,
which C++ type a field has) is decided here, once.
"""

import json
import re

from schema_parser import SchemaError

PRIMITIVE_SIZES = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4,
    "float64": 8, "bool": 1, "uuid": 16,
}
INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
}
CPP_PRIMITIVE = {
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint16": "uint16_t", "uint32": "uint32_t", "float64": "double", "bool": "bool",
    "uuid": "Uuid", "string": "std::string", "bytes": "Bytes", "records": "Records",
}
# Which entity types become strong ids, per wire type.
STRONG_IDS = {("brokerId", "int32"): "NodeId", ("producerId", "int64"): "ProducerId"}
# An int16 field whose name ends so holds a Kafka error code: it becomes `ErrorCode`, the enum
# of common/protocol/error_code.h (any int16 is a value of it, so decoding never fails on it).
ERROR_CODE_SUFFIX = "ErrorCode"
# Names a nested struct may not take: they would hide the codec's own types inside messages.
RESERVED_TYPE_NAMES = {"Uuid", "Records", "Bytes", "RawTaggedField", "Reader", "Writer",
                       "SizeCounter", "NodeId", "ProducerId", "ErrorCode"}
CPP_KEYWORDS = set("""alignas alignof and and_eq asm auto bitand bitor bool break case catch
char char8_t char16_t char32_t class compl concept const consteval constexpr constinit
const_cast continue co_await co_return co_yield decltype default delete do double dynamic_cast
else enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
switch template this thread_local throw true try typedef typeid typename union unsigned using
virtual void volatile wchar_t while xor xor_eq""".split())


def snake_case(name):
    s = name.replace("KRaft", "Kraft")
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    return s + "_" if s in CPP_KEYWORDS else s


class Versions:
    """A contiguous version range: lo..hi inclusive, hi None for open-ended, or empty."""

    def __init__(self, lo, hi, empty=False):
        self.lo, self.hi, self.empty = lo, hi, empty

    @staticmethod
    def parse(text, where):
        text = str(text).strip()
        try:
            if text == "none":
                return Versions(0, -1, empty=True)
            if text.endswith("+"):
                return Versions(int(text[:-1]), None)
            if "-" in text:
                lo, hi = text.split("-", 1)
                lo, hi = int(lo), int(hi)
                if hi < lo:
                    raise ValueError
                return Versions(lo, hi)
            v = int(text)
            return Versions(v, v)
        except ValueError:
            raise SchemaError("%s: bad version range %r" % (where, text))

    def contains(self, v):
        return not self.empty and v >= self.lo and (self.hi is None or v <= self.hi)

    def intersect(self, other):
        if self.empty or other.empty:
            return Versions(0, -1, True)
        lo = max(self.lo, other.lo)
        his = [h for h in (self.hi, other.hi) if h is not None]
        hi = min(his) if his else None
        if hi is not None and hi < lo:
            return Versions(0, -1, True)
        return Versions(lo, hi)

    def covers(self, other):
        """True when every version in `other` is in self."""
        if other.empty:
            return True
        if self.empty:
            return False
        if other.lo < self.lo:
            return False
        if self.hi is None:
            return True
        return other.hi is not None and other.hi <= self.hi

    def cond(self, var, lo_bound, hi_bound):
        """A C++ boolean expression for `var` in this range, knowing var is in
        [lo_bound, hi_bound] (the message's valid versions)."""
        if self.empty:
            return "false"
        parts = []
        if self.lo > lo_bound:
            parts.append("%s >= %d" % (var, self.lo))
        if self.hi is not None and self.hi < hi_bound:
            parts.append("%s <= %d" % (var, self.hi))
        if self.hi is not None and self.hi < lo_bound:
            return "false"
        if self.lo > hi_bound:
            return "false"
        return " && ".join(parts) if parts else "true"

    def __str__(self):
        if self.empty:
            return "none"
        if self.hi is None:
            return "%d+" % self.lo
        return "%d-%d" % (self.lo, self.hi)


class Type:
    """kind: a primitive name, 'string', 'bytes', 'records', 'struct' or 'array'."""

    def __init__(self, kind, element=None, struct=None, strong=None):
        self.kind, self.element, self.struct, self.strong = kind, element, struct, strong

    @property
    def is_struct(self):
        return self.kind == "struct"

    @property
    def is_array(self):
        return self.kind == "array"

    def cpp(self):
        if self.kind == "array":
            return "std::vector<%s>" % self.element.cpp()
        if self.kind == "struct":
            return self.struct.name
        if self.strong:
            return self.strong
        return CPP_PRIMITIVE[self.kind]

    def min_size(self, flexible):
        """Fewest bytes one value of this type takes on the wire."""
        if self.kind in PRIMITIVE_SIZES:
            return PRIMITIVE_SIZES[self.kind]
        if self.kind == "string":
            return 1 if flexible else 2
        if self.kind in ("bytes", "records", "array"):
            return 1 if flexible else 4
        if self.kind == "struct":
            return self.struct.min_size
        raise AssertionError(self.kind)


class Field:
    def __init__(self, raw, struct, message):
        self.where = raw["line"]
        a = dict(raw["attrs"])
        self.name = raw["name"]
        if not re.match(r"^[A-Za-z][A-Za-z0-9]*$", self.name):
            raise SchemaError("%s: bad field name %r" % (self.where, self.name))
        self.member = snake_case(self.name)
        self.type_text = raw["type"]
        self.versions = Versions.parse(a.pop("versions", None) or _missing(self.where, "versions"),
                                       self.where)
        self.nullable = Versions.parse(a.pop("nullable", "none"), self.where)
        self.tag = a.pop("tag", None)
        tagged = a.pop("tagged", None)
        if (self.tag is None) != (tagged is None):
            raise SchemaError("%s: tag and tagged go together" % self.where)
        if self.tag is not None:
            try:
                self.tag = int(self.tag)
            except ValueError:
                raise SchemaError("%s: bad tag %r" % (self.where, self.tag))
            self.tagged = Versions.parse(tagged, self.where)
            if not self.versions.covers(self.tagged):
                raise SchemaError("%s: tagged versions outside the field's versions" % self.where)
            if not message.flexible.covers(self.tagged):
                raise SchemaError("%s: tagged versions must be flexible versions" % self.where)
        else:
            self.tagged = Versions(0, -1, True)
        self.field_flexible = a.pop("flexible", None)
        if self.field_flexible is not None and message.kind != "header":
            raise SchemaError("%s: a field-level flexible= is only allowed in headers" % self.where)
        self.default_text = a.pop("default", None)
        self.ignorable = bool(a.pop("ignorable", False))
        self.entity = a.pop("entity", None)
        if a:
            raise SchemaError("%s: unknown attributes %s" % (self.where, sorted(a)))
        # Kafka's files sometimes give nullable versions wider than the field's versions
        # (e.g. nullable=0+ on a 1+ field); only the overlap matters.
        if self.nullable.intersect(self.versions).empty:
            self.nullable = Versions(0, -1, True)
        self.raw_children = raw["fields"]
        self.type = None  # resolved by Message

    # -- presence --------------------------------------------------------------------------

    @property
    def is_tagged(self):
        return self.tag is not None

    def present(self):
        """Versions in which the field is on the wire (as a regular or a tagged field)."""
        return self.tagged if self.is_tagged else self.versions

    def ever_nullable(self):
        return not self.nullable.empty

    # -- C++ -------------------------------------------------------------------------------

    def cpp_type(self):
        t = self.type.cpp()
        if self.ever_nullable() and self.type.kind in ("string", "bytes", "array", "struct"):
            return "std::optional<%s>" % t
        return t

    def is_optional(self):
        return self.ever_nullable() and self.type.kind in ("string", "bytes", "array", "struct")

    def default_is_null(self):
        return self.default_text == "null"

    def initializer(self):
        """The member initializer (including '=' or '{'), or '' for value-initialization."""
        k = self.type.kind
        d = self.default_text
        if self.is_optional():
            return "" if self.default_is_null() else "{std::in_place}"
        if k in INT_RANGES:
            v = self.int_default()
            if self.type.strong:
                # `{}` too: an ErrorCode is an enum, which has no default of its own.
                return "{%s}" % (_int_literal(v, k) if v != 0 else "")
            return " = %s" % _int_literal(v, k)
        if k == "bool":
            return " = %s" % ("true" if self.bool_default() else "false")
        if k == "float64":
            return " = %s" % repr(float(d or 0))
        if k == "string":
            return "" if not d else " = %s" % json.dumps(d)
        return ""

    def int_default(self):
        d = self.default_text
        if d is None:
            return 0
        try:
            v = int(d, 0)
        except ValueError:
            raise SchemaError("%s: bad integer default %r" % (self.where, d))
        lo, hi = INT_RANGES[self.type.kind]
        if not lo <= v <= hi:
            raise SchemaError("%s: default %r out of range" % (self.where, d))
        return v

    def bool_default(self):
        d = (self.default_text or "false").lower()
        if d not in ("true", "false"):
            raise SchemaError("%s: bad bool default %r" % (self.where, self.default_text))
        return d == "true"

    def is_default_expr(self, acc, scope=None):
        """A C++ expression that is true when `acc` holds this field's default. `scope`
        qualifies nested struct names for use outside the message struct."""
        k = self.type.kind
        struct_cpp = None
        if k == "struct":
            struct_cpp = ("%s::%s" % (scope, self.type.struct.name)) if scope else self.type.cpp()
        if self.is_optional():
            if self.default_is_null():
                return "!%s" % acc
            if k == "struct":
                return "(%s && *%s == %s{})" % (acc, acc, struct_cpp)
            return "(%s && %s->empty())" % (acc, acc)
        if k in INT_RANGES:
            v = _int_literal(self.int_default(), k)
            if self.type.strong:
                return "internal::Raw(%s) == %s" % (acc, v)
            return "%s == %s" % (acc, v)
        if k == "bool":
            return "%s == %s" % (acc, "true" if self.bool_default() else "false")
        if k == "float64":
            return "%s == %s" % (acc, repr(float(self.default_text or 0)))
        if k == "string":
            return "%s.empty()" % acc if not self.default_text else "%s == %s" % (
                acc, json.dumps(self.default_text))
        if k in ("bytes", "array"):
            return "%s.empty()" % acc
        if k == "uuid":
            return "%s.IsZero()" % acc
        if k == "records":
            return "%s.IsNull()" % acc
        if k == "struct":
            return "%s == %s{}" % (acc, struct_cpp)
        raise AssertionError(k)

    def validate_default(self):
        k = self.type.kind
        d = self.default_text
        if d is None:
            return
        if d == "null":
            if not self.ever_nullable():
                raise SchemaError("%s: null default on a non-nullable field" % self.where)
            if k not in ("string", "bytes", "array", "struct"):
                raise SchemaError("%s: null default on a %s field" % (self.where, k))
            return
        if k in INT_RANGES:
            self.int_default()
        elif k == "bool":
            self.bool_default()
        elif k == "float64":
            try:
                float(d)
            except ValueError:
                raise SchemaError("%s: bad float default %r" % (self.where, d))
        elif k == "string":
            pass
        elif d != "":
            raise SchemaError("%s: a %s field cannot have default %r" % (self.where, k, d))


def _int_literal(v, kind):
    if kind == "int64" and v == -2**63:
        return "(-9223372036854775807LL - 1)"
    if kind == "int32" and v == -2**31:
        return "(-2147483647 - 1)"
    if kind == "int64":
        return "%dLL" % v if abs(v) > 2**31 - 1 else str(v)
    if kind == "uint32":
        return "%du" % v
    return str(v)


def _missing(where, what):
    raise SchemaError("%s: %s= is required" % (where, what))


class Struct:
    def __init__(self, name, fields, where, versions=None):
        if name in RESERVED_TYPE_NAMES:
            raise SchemaError("%s: struct name %r is reserved" % (where, name))
        self.name, self.fields, self.where = name, fields, where
        self.versions = versions
        self.min_size = None  # set by Message

    def tagged_fields(self):
        return sorted((f for f in self.fields if f.is_tagged), key=lambda f: f.tag)


class Message:
    def __init__(self, doc):
        a = dict(doc["attrs"])
        self.where = doc["line"]
        self.kind = doc["kind"]
        self.name = doc["name"]
        if not re.match(r"^[A-Z][A-Za-z0-9]*$", self.name):
            raise SchemaError("%s: bad message name %r" % (self.where, self.name))
        self.api_key = a.pop("key", None)
        if self.kind == "data":
            # Kafka's "data" messages (records of internal topics, embedded payloads) are
            # plain versioned structs: no API key, no request/response pairing.
            if self.api_key is not None:
                raise SchemaError("%s: a data message has no key=" % self.where)
        elif self.kind != "header":
            if self.api_key is None:
                raise SchemaError("%s: key= is required" % self.where)
            self.api_key = int(self.api_key)
            suffix = "Request" if self.kind == "request" else "Response"
            if not self.name.endswith(suffix):
                raise SchemaError("%s: a %s's name ends in %s" % (self.where, self.kind, suffix))
            self.api_name = self.name[: -len(suffix)]
        self.versions = Versions.parse(a.pop("versions", None) or _missing(self.where, "versions"),
                                       self.where)
        if self.versions.empty or self.versions.hi is None:
            raise SchemaError("%s: versions must be a closed range" % self.where)
        self.flexible = Versions.parse(a.pop("flexible", "none"), self.where)
        self.deprecated = Versions.parse(a.pop("deprecated", "none"), self.where)
        self.latest_unstable = bool(a.pop("latest-unstable", False))
        self.listeners = a.pop("listeners", "")
        self.listeners = self.listeners.split(",") if self.listeners else []
        if a:
            raise SchemaError("%s: unknown attributes %s" % (self.where, sorted(a)))

        self.lo, self.hi = self.versions.lo, self.versions.hi
        self.first_flexible = -1 if self.flexible.empty else self.flexible.lo
        if not self.flexible.empty and self.flexible.hi is not None:
            raise SchemaError("%s: flexible versions must be open-ended" % self.where)

        self.common = {}
        for s in doc["structs"]:
            if s["name"] in self.common:
                raise SchemaError("%s: struct %s defined twice" % (s["line"], s["name"]))
            self.common[s["name"]] = s
        self.structs = []        # every struct type, dependencies first
        self._by_name = {}
        self.root = self._build_struct(self.name, doc["fields"], self.where, top=True)
        for name in self.common:
            if name not in self._by_name:
                raise SchemaError("%s: common struct %s is never used" % (self.where, name))
        for st in self.structs:
            self._compute_min_size(st)

    def _build_struct(self, name, raw_fields, where, top=False, versions=None):
        if not top:
            if name in self._by_name:
                raise SchemaError("%s: struct %s defined twice" % (where, name))
            if name == self.name:
                raise SchemaError("%s: struct %s has the message's name" % (where, name))
        st = Struct(name, [], where, versions)
        if not top:
            self._by_name[name] = st
        seen_members, seen_tags = set(), set()
        for raw in raw_fields:
            f = Field(raw, st, self)
            if f.member in seen_members:
                raise SchemaError("%s: field %s given twice" % (f.where, f.name))
            seen_members.add(f.member)
            if f.is_tagged:
                if f.tag in seen_tags:
                    raise SchemaError("%s: tag %d used twice" % (f.where, f.tag))
                seen_tags.add(f.tag)
            f.type = self._resolve_type(f)
            f.validate_default()
            if f.ever_nullable() and f.type.kind not in ("string", "bytes", "records", "array",
                                                        "struct"):
                raise SchemaError("%s: a %s field cannot be nullable" % (f.where, f.type.kind))
            st.fields.append(f)
        if top:
            self.structs.append(st)
        else:
            self.structs.append(st)
        return st

    def _resolve_type(self, f):
        text = f.type_text
        is_array = text.startswith("[]")
        base = text[2:] if is_array else text
        if base in PRIMITIVE_SIZES or base in ("string", "bytes", "records"):
            if f.raw_children:
                raise SchemaError("%s: a %s field has no subfields" % (f.where, base))
            if base == "records" and is_array:
                raise SchemaError("%s: arrays of records are not a Kafka type" % f.where)
            strong = STRONG_IDS.get((f.entity, base))
            if base == "int16" and f.name.endswith(ERROR_CODE_SUFFIX):
                strong = "ErrorCode"
            t = Type(base, strong=strong)
            return Type("array", element=t) if is_array else t
        if not re.match(r"^[A-Z][A-Za-z0-9]*$", base):
            raise SchemaError("%s: unknown type %r" % (f.where, text))
        if f.raw_children:
            if base in self.common:
                raise SchemaError("%s: %s is a common struct; do not redefine it" % (f.where, base))
            st = self._build_struct(base, f.raw_children, f.where)
        elif base in self._by_name:
            st = self._by_name[base]
        elif base in self.common:
            c = self.common[base]
            versions = Versions.parse(c["attrs"].get("versions", "0+"), c["line"])
            st = self._build_struct(base, c["fields"], c["line"], versions=versions)
        else:
            raise SchemaError("%s: struct %s has no definition" % (f.where, base))
        t = Type("struct", struct=st)
        return Type("array", element=t) if is_array else t

    def _compute_min_size(self, st):
        # The fewest bytes an encoded struct takes at each version; it bounds array counts
        # against the bytes left (see Reader::ReadArrayLength). Children come first in
        # self.structs, so their tables are ready.
        st.min_size_at = {}
        for v in range(self.lo, self.hi + 1):
            flex = self.flexible.contains(v)
            n = 1 if flex else 0
            for f in st.fields:
                if f.is_tagged or not f.versions.contains(v):
                    continue
                if f.is_optional() and f.type.is_struct:
                    n += 1
                elif f.type.is_struct:
                    n += f.type.struct.min_size_at[v]
                else:
                    n += f.type.min_size(flex)
            st.min_size_at[v] = n
        st.min_size = max(min(st.min_size_at.values()), 1)

    def min_element_size(self, f):
        """Fewest bytes one element of array field `f` takes in any version `f` is present in
        (at least 1)."""
        t = f.type.element
        present = f.present().intersect(self.versions)
        best = None
        for v in range(present.lo, (present.hi if present.hi is not None else self.hi) + 1):
            flex = self.flexible.contains(v)
            n = t.struct.min_size_at[v] if t.kind == "struct" else t.min_size(flex)
            best = n if best is None else min(best, n)
        return max(best or 1, 1)

    def is_flexible(self, v):
        return self.flexible.contains(v)


def load(path):
    import schema_parser
    return Message(schema_parser.parse_file(path))
