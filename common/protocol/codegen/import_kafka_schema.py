#!/usr/bin/env python3
"""Converts Apache Kafka's message JSON files into Runnel's schema files.

Usage: import_kafka_schema.py [--check [--skip-missing]] [--data [--skip-prefix P]...]
                              <kafka messages dir or jar> <output dir>

The source is a directory of Kafka's JSON files (common/message/ of Kafka's source tree) or a
jar holding them under common/message/ (kafka-clients-<version>.jar: Runnel's schema follows
the kafka-clients release that scripts/peers/pom.xml names).

With --check nothing is written: the exit status is 1 if <output dir> differs from what the
import would produce (a stale or hand-broken schema file), 0 if it matches; with
--skip-missing, 77 (CTest's skip) when the source does not exist.

Only the facts the codec needs are carried over (names, types, version ranges, nullability,
tags, defaults, ignorable, entity types); Kafka's descriptive texts and comments are dropped.
By default every request/response with an apiKey is imported, plus RequestHeader and
ResponseHeader; an API Kafka removed (validVersions "none": LeaderAndIsr and the other
ZooKeeper-era inter-broker APIs, gone in Kafka 4.0) has nothing to import. With --data, the `data` messages are imported instead (e.g. Kafka's
group-coordinator records into schema/coordinator/), except names starting with a
--skip-prefix (e.g. `--skip-prefix Share`).
The format is described in common/protocol/schema/README.md.
"""

import json
import os
import sys
import zipfile

# Versions below Kafka's minimum that Runnel's codec keeps, by message name: Kafka 4.0 removed
# Produce v0-v2 (KIP-896) but still advertises Produce from v0 in ApiVersions (KAFKA-18659:
# librdkafka before 2.10 takes a Produce minimum above 2 for a broker without message format
# v2). Runnel advertises them too and answers them UNSUPPORTED_VERSION per partition, so its
# codec decodes them. Kafka's JSON still describes their fields (every Produce field has the
# same version range as before the removal), so only the message's range is widened.
KEPT_MIN_VERSIONS = {"ProduceRequest": 0, "ProduceResponse": 0}

# Field attributes written after the type, in this order.
_KEEP_HEADER_KINDS = ("request", "response", "header")


def _strip_comments(text):
    # Kafka's files are JSON with whole-line // comments (license header, notes).
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def _norm_versions(v):
    v = str(v).strip()
    return v


def _default_literal(value):
    if value is None:  # JSON null (some files write "null" as a string instead)
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    s = str(value)
    if s.lower() in ("true", "false"):
        return s.lower()
    if s == "":
        return '""'
    if any(c.isspace() for c in s) or '"' in s:
        return json.dumps(s)
    return s


def _field_line(f, indent):
    # A tagged-only field (TransactionLogValue's) gives taggedVersions and no versions: Kafka
    # takes the one for the other.
    versions = f["versions"] if "versions" in f else f["taggedVersions"]
    parts = [f["name"], f["type"], "versions=" + _norm_versions(versions)]
    if "nullableVersions" in f:
        parts.append("nullable=" + _norm_versions(f["nullableVersions"]))
    if "flexibleVersions" in f:
        parts.append("flexible=" + _norm_versions(f["flexibleVersions"]))
    if "tag" in f:
        parts.append("tag=" + str(int(f["tag"])))
        parts.append("tagged=" + _norm_versions(f["taggedVersions"]))
    elif "taggedVersions" in f:
        raise ValueError("field %s has taggedVersions without tag" % f["name"])
    if "default" in f:
        parts.append("default=" + _default_literal(f["default"]))
    if f.get("ignorable") is True:
        parts.append("ignorable")
    if "entityType" in f:
        parts.append("entity=" + f["entityType"])
    return "  " * indent + " ".join(parts)


def _emit_fields(fields, indent, out):
    for f in fields:
        out.append(_field_line(f, indent))
        if "fields" in f:
            _emit_fields(f["fields"], indent + 1, out)


def _valid_versions(doc):
    versions = _norm_versions(doc["validVersions"])
    keep = KEPT_MIN_VERSIONS.get(doc["name"])
    if keep is None:
        return versions
    low, _, high = versions.partition("-")
    if keep >= int(low):
        raise ValueError("%s: Kafka's minimum %s is not above the kept %d" % (doc["name"], low, keep))
    return "%d-%s" % (keep, high or low)


def convert(doc, source_name):
    kind = doc["type"]
    head = [kind, doc["name"]]
    if "apiKey" in doc:
        head.append("key=%d" % doc["apiKey"])
    head.append("versions=" + _valid_versions(doc))
    head.append("flexible=" + _norm_versions(doc["flexibleVersions"]))
    if "deprecatedVersions" in doc:
        head.append("deprecated=" + _norm_versions(doc["deprecatedVersions"]))
    if doc.get("latestVersionUnstable"):
        head.append("latest-unstable")
    if "listeners" in doc:
        head.append("listeners=" + ",".join(doc["listeners"]))
    out = [
        "# %s: imported from Apache Kafka's %s (Apache-2.0) by codegen/import_kafka_schema.py."
        % (doc["name"], source_name),
        " ".join(head),
    ]
    _emit_fields(doc["fields"], 1, out)
    for cs in doc.get("commonStructs", []):
        line = "struct " + cs["name"]
        if "versions" in cs:
            line += " versions=" + _norm_versions(cs["versions"])
        out.append(line)
        _emit_fields(cs["fields"], 1, out)
    return "\n".join(out) + "\n"


def _wanted(doc, data, skip_prefixes):
    if data:
        return doc.get("type") == "data" and not doc["name"].startswith(tuple(skip_prefixes))
    if doc.get("type") not in _KEEP_HEADER_KINDS:
        return False
    if doc.get("validVersions") == "none":  # an API Kafka removed
        return False
    return doc["type"] == "header" or "apiKey" in doc


def _sources(src):
    """(file name, text) of every JSON file in a directory or in a jar's common/message/."""
    if os.path.isdir(src):
        for name in sorted(os.listdir(src)):
            if name.endswith(".json"):
                with open(os.path.join(src, name), encoding="utf-8") as fh:
                    yield name, fh.read()
        return
    prefix = "common/message/"
    with zipfile.ZipFile(src) as jar:
        for entry in sorted(jar.namelist()):
            name = entry[len(prefix):]
            if entry.startswith(prefix) and name.endswith(".json") and "/" not in name:
                yield name, jar.read(entry).decode("utf-8")


def main(argv):
    args = list(argv[1:])
    check = data = skip_missing = False
    skip_prefixes = []
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--check":
            check = True
        elif opt == "--skip-missing":
            skip_missing = True
        elif opt == "--data":
            data = True
        elif opt == "--skip-prefix" and args:
            skip_prefixes.append(args.pop(0))
        else:
            sys.stderr.write(__doc__)
            return 2
    argv = argv[:1] + args
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    src, dst = argv[1], argv[2]
    if check and skip_missing and not os.path.exists(src):
        print("%s is not there: nothing to check against" % src)
        return 77
    if not check:
        os.makedirs(dst, exist_ok=True)
    count = 0
    expected = set()
    stale = []
    for name, source_text in _sources(src):
        doc = json.loads(_strip_comments(source_text))
        if not _wanted(doc, data, skip_prefixes):
            continue
        text = convert(doc, name)
        out_path = os.path.join(dst, doc["name"] + ".schema")
        expected.add(os.path.basename(out_path))
        count += 1
        if check:
            try:
                with open(out_path, encoding="utf-8") as fh:
                    if fh.read() != text:
                        stale.append(out_path + " differs")
            except FileNotFoundError:
                stale.append(out_path + " is missing")
            continue
        with open(out_path, "w", encoding="utf-8") as fh:
            fh.write(text)
    if check:
        extra = [n for n in os.listdir(dst) if n.endswith(".schema") and n not in expected]
        stale += [os.path.join(dst, n) + " has no Kafka counterpart" for n in sorted(extra)]
        for line in stale:
            print(line)
        print("%d schema files checked, %d problems" % (count, len(stale)))
        return 1 if stale else 0
    print("wrote %d schema files to %s" % (count, dst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
