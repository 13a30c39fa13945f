#!/usr/bin/env python3
"""Tests of the schema parser and model: Kafka's rules the generator relies on, and that bad
schema text is refused with a message naming the line."""

import os
import sys
import unittest

# Run from the build: never leave __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model  # noqa: E402
import schema_parser  # noqa: E402
from schema_parser import SchemaError  # noqa: E402


def load(text):
    return model.Message(schema_parser.parse(text, "test.schema"))


GOOD = """\
# comment
request FooRequest key=99 versions=0-3 flexible=2+
  Items []Item versions=0+ nullable=1+
    Id int32 versions=0+ entity=brokerId
    Name string versions=1+ nullable=3+ default=null
  Flag bool versions=1+ default=true ignorable
  Limit int32 versions=0+ default=0x7fffffff
  Extra string versions=2+ tag=0 tagged=2+ default=""
  Shared Common versions=0+
struct Common versions=0+
  Value int64 versions=0+ default=-1 entity=producerId
"""


class ModelTest(unittest.TestCase):
    def test_good_schema(self):
        m = load(GOOD)
        self.assertEqual(m.api_name, "Foo")
        self.assertEqual((m.lo, m.hi, m.first_flexible), (0, 3, 2))
        root = m.root
        items, flag, limit, extra, shared = root.fields
        self.assertEqual(items.cpp_type(), "std::optional<std::vector<Item>>")
        self.assertEqual(items.initializer(), "{std::in_place}")  # nullable, no null default
        item = items.type.element.struct
        self.assertEqual(item.fields[0].cpp_type(), "NodeId")
        self.assertEqual(item.fields[1].cpp_type(), "std::optional<std::string>")
        self.assertEqual(item.fields[1].initializer(), "")  # default null
        self.assertEqual(flag.initializer(), " = true")
        self.assertEqual(limit.initializer(), " = 2147483647")
        self.assertTrue(extra.is_tagged)
        self.assertEqual(extra.is_default_expr("x"), "x.empty()")
        self.assertEqual(shared.type.struct.fields[0].cpp_type(), "ProducerId")
        self.assertEqual(shared.type.struct.fields[0].initializer(), "{-1}")
        # Dependencies first, the message last.
        self.assertEqual([s.name for s in m.structs], ["Item", "Common", "FooRequest"])
        # Item: int32 + (v1+) string; min over versions is v0's 4 bytes.
        self.assertEqual(m.min_element_size(items), 4)

    def test_error_code_fields_are_typed(self):
        m = load("""\
response FooResponse key=99 versions=0-1
  ErrorCode int16 versions=0+
  TopicConfigErrorCode int16 versions=1+ default=-1
  ErrorCount int16 versions=0+
  LegacyErrorCode int32 versions=0+
""")
        code, config_code, count, wide = m.root.fields
        self.assertEqual(code.cpp_type(), "ErrorCode")
        self.assertEqual(code.initializer(), "{}")  # NONE; an enum has no default of its own
        self.assertEqual(code.is_default_expr("x"), "internal::Raw(x) == 0")
        self.assertEqual(config_code.cpp_type(), "ErrorCode")
        self.assertEqual(config_code.initializer(), "{-1}")
        # Only int16 fields named ...ErrorCode: a count or a wider integer stays an integer.
        self.assertEqual(count.cpp_type(), "int16_t")
        self.assertEqual(wide.cpp_type(), "int32_t")

    def test_version_conditions(self):
        v = model.Versions.parse("2-5", "x")
        self.assertEqual(v.cond("v", 0, 10), "v >= 2 && v <= 5")
        self.assertEqual(v.cond("v", 2, 5), "true")
        self.assertEqual(model.Versions.parse("none", "x").cond("v", 0, 3), "false")
        self.assertEqual(model.Versions.parse("7+", "x").cond("v", 0, 3), "false")
        self.assertTrue(model.Versions.parse("1+", "x").covers(model.Versions.parse("3-4", "x")))
        self.assertFalse(model.Versions.parse("1-3", "x").covers(model.Versions.parse("2+", "x")))

    def test_snake_case(self):
        self.assertEqual(model.snake_case("ThrottleTimeMs"), "throttle_time_ms")
        self.assertEqual(model.snake_case("TopicId"), "topic_id")
        self.assertEqual(model.snake_case("isKRaftController"), "is_kraft_controller")
        self.assertEqual(model.snake_case("V3AndBelowTopics"), "v3_and_below_topics")
        self.assertEqual(model.snake_case("Operator"), "operator_")

    def assertSchemaError(self, text, fragment):
        with self.assertRaises(SchemaError) as ctx:
            load(text)
        self.assertIn(fragment, str(ctx.exception))

    def test_errors_name_the_line(self):
        head = "request FooRequest key=1 versions=0-3 flexible=2+\n"
        self.assertSchemaError(head + "  A int32\n", "test.schema:2")
        self.assertSchemaError(head + "  A int33 versions=0+\n", "unknown type")
        self.assertSchemaError(head + "  A Missing versions=0+\n", "no definition")
        self.assertSchemaError(head + "   A int32 versions=0+\n", "multiple of two")
        self.assertSchemaError(head + "  A int32 versions=0+ colour=red\n", "unknown attributes")
        self.assertSchemaError(head + "  A int32 versions=0+ nullable=0+\n", "cannot be nullable")
        self.assertSchemaError(head + "  A int8 versions=0+ default=300\n", "out of range")
        self.assertSchemaError(head + "  A string versions=0+ default=null\n", "non-nullable")
        self.assertSchemaError(head + "  A int32 versions=0+ tag=0 tagged=0+\n", "flexible")
        self.assertSchemaError(head + "  A int32 versions=2+ tag=0 tagged=2+\n"
                               "  B int32 versions=2+ tag=0 tagged=2+\n", "tag 0 used twice")
        self.assertSchemaError(head + "  A int32 versions=0+\n  A int32 versions=0+\n",
                               "given twice")
        self.assertSchemaError(head + "  A X versions=0+\n    B int32 versions=0+\n"
                               "  C X versions=0+\n    B int32 versions=0+\n", "defined twice")
        self.assertSchemaError("request FooRequest key=1 versions=0+\n", "closed range")
        self.assertSchemaError("request Foo key=1 versions=0-1\n", "ends in Request")


DATA = """\
data FooValue versions=0-4 flexible=4+
  Offset int64 versions=0+
  Expire int64 versions=1 default=-1 ignorable
  Members []Member versions=0+
    Id string versions=0+
"""


class DataMessageTest(unittest.TestCase):
    def test_data_message(self):
        m = load(DATA)
        self.assertEqual(m.kind, "data")
        self.assertEqual((m.lo, m.hi, m.first_flexible), (0, 4, 4))
        self.assertEqual([s.name for s in m.structs], ["Member", "FooValue"])
        import emit_cpp
        header = emit_cpp.emit_data_header(m, "coordinator")
        self.assertIn("struct FooValue {", header)
        self.assertNotIn("kApiKey", header)
        self.assertNotIn("ResponseType", header)
        source = emit_cpp.emit_data_source(m, "coordinator")
        self.assertIn('#include "common/protocol/coordinator/foo_value.h"', source)
        self.assertIn("if (v >= 1 && v <= 1) w.WriteInt64(m.expire);", source)

    def test_data_message_has_no_key(self):
        with self.assertRaises(SchemaError) as ctx:
            load("data FooValue key=3 versions=0\n  A int32 versions=0+\n")
        self.assertIn("no key=", str(ctx.exception))

    def test_importer_keeps_data_and_json_null_default(self):
        import import_kafka_schema
        doc = {"type": "data", "name": "FooValue", "validVersions": "0",
               "flexibleVersions": "0+",
               "fields": [{"name": "X", "type": "X", "versions": "0+", "nullableVersions": "0+",
                           "default": None, "tag": 0, "taggedVersions": "0+",
                           "fields": [{"name": "Y", "type": "int32", "versions": "0+"}]}]}
        text = import_kafka_schema.convert(doc, "FooValue.json")
        self.assertIn("data FooValue versions=0 flexible=0+\n", text)
        self.assertIn("X X versions=0+ nullable=0+ tag=0 tagged=0+ default=null\n", text)
        self.assertTrue(import_kafka_schema._wanted(doc, True, []))
        self.assertFalse(import_kafka_schema._wanted(doc, True, ["Foo"]))
        self.assertFalse(import_kafka_schema._wanted(doc, False, []))
        m = load("\n".join(text.splitlines()[1:]) + "\n")
        self.assertEqual(m.root.fields[0].initializer(), "")  # null default


class RealSchemaTest(unittest.TestCase):
    def test_every_schema_file_loads(self):
        import generate
        schema_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema")
        apis = generate.load_apis(schema_dir)
        self.assertEqual(len(apis), 91)
        keys = [a[1].api_key for a in apis]
        self.assertEqual(keys, sorted(keys))

    def test_coordinator_records_load(self):
        import generate
        schema_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema")
        data = generate.load_data(schema_dir, generate.load_apis(schema_dir))
        self.assertEqual(len(data), 18)
        self.assertEqual({d for d, _ in data}, {"coordinator", "transaction"})
        by_name = {m.name: m for _, m in data}
        self.assertEqual((by_name["OffsetCommitValue"].lo, by_name["OffsetCommitValue"].hi), (0, 4))
        self.assertEqual(by_name["GroupMetadataKey"].lo, 2)
        self.assertEqual((by_name["TransactionLogValue"].lo, by_name["TransactionLogValue"].hi),
                         (0, 1))
        outputs = generate.codec_outputs([], data)
        self.assertIn("common/protocol/coordinator/offset_commit_key.h", outputs)


if __name__ == "__main__":
    unittest.main()
