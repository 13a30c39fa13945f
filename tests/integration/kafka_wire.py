"""Hand-built Kafka requests for the cases no client will send: bad CRCs, two batches for
one partition, acks=2, removed Produce versions. Also reads record batch headers back, so a
test can see how the broker stored a batch (its compression, its offsets).

Only what the integration tests need: Produce v2..v8 (non-flexible), Fetch v4 and v7 (with a
fetch session, KIP-227), record
batch v2 with uncompressed records, ApiVersions v0; and ApiWriter / ApiReader, a codec for
any API's body, flexible versions included, which tests drive through Connection.call.
"""
import socket
import struct

from harness import read_response, send_request

# Kafka error codes the tests assert (the protocol guide's table).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
INVALID_RECORD = 87

PRODUCE = 0
FETCH = 1
API_VERSIONS = 18

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def uvarint(n):
    """Unsigned varint, as flexible versions write lengths."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n):
    """Zigzag varint, as record fields are written."""
    return uvarint((n << 1) ^ (n >> 63))


def _varbytes(b):
    return varint(-1) if b is None else varint(len(b)) + b


def encode_record(offset_delta, timestamp_delta, key, value, headers=()):
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + _varbytes(key) + \
        _varbytes(value) + varint(len(headers))
    for name, hv in headers:
        body += _varbytes(name.encode()) + _varbytes(hv)
    return varint(len(body)) + body


def record_batch(values, timestamp_ms, key=None, base_offset=0, corrupt_crc=False,
                 attributes=0, producer_id=-1, producer_epoch=-1, base_sequence=-1):
    """One uncompressed record batch (magic 2) of `values`, every record with `key`."""
    records = b"".join(encode_record(i, 0, key, v) for i, v in enumerate(values))
    n = len(values)
    # Everything after the CRC field: attributes .. records.
    after_crc = struct.pack(">hiqqqhii", attributes, n - 1, timestamp_ms, timestamp_ms,
                            producer_id, producer_epoch, base_sequence, n) + records
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0x5A5A5A5A
    # batch length counts from the partition leader epoch to the end.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, -1, 2, crc) + after_crc


def _string(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def produce_body(version, acks, timeout_ms, topic, partition_records, transactional_id=None):
    """Produce request body, v0..v8. partition_records: {partition: bytes}."""
    body = b""
    if version >= 3:
        body += _string(transactional_id)
    body += struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", len(partition_records))
    for p, records in partition_records.items():
        body += struct.pack(">ii", p, len(records)) + records
    return body


class ApiWriter:
    """A request body. `flexible` versions write compact strings and arrays; a struct's
    writer ends it with tags() (a no-op in older versions)."""

    def __init__(self, flexible=False):
        self.flexible = flexible
        self.buf = bytearray()

    def _pack(self, fmt, v):
        self.buf += struct.pack(fmt, v)
        return self

    def i8(self, v):
        return self._pack(">b", v)

    def i16(self, v):
        return self._pack(">h", v)

    def i32(self, v):
        return self._pack(">i", v)

    def i64(self, v):
        return self._pack(">q", v)

    def uuid(self, b):
        assert len(b) == 16, b
        self.buf += b
        return self

    def string(self, s):
        """`s` None writes a null string."""
        if s is None:
            self.buf += uvarint(0) if self.flexible else struct.pack(">h", -1)
            return self
        b = s.encode()
        self.buf += uvarint(len(b) + 1) if self.flexible else struct.pack(">h", len(b))
        self.buf += b
        return self

    def array(self, items, write_item):
        """`items` None writes a null array."""
        if items is None:
            self.buf += uvarint(0) if self.flexible else struct.pack(">i", -1)
            return self
        self.buf += uvarint(len(items) + 1) if self.flexible else struct.pack(">i", len(items))
        for item in items:
            write_item(self, item)
        return self

    def tags(self):
        if self.flexible:
            self.buf += uvarint(0)
        return self


class ApiReader:
    """A response body, read front to back; `flexible` as in ApiWriter."""

    def __init__(self, data, flexible=False):
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, fmt):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def i8(self):
        return self.take(">b")

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def i64(self):
        return self.take(">q")

    def uvarint(self):
        shift = n = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def _length(self, fixed_fmt):
        return self.uvarint() - 1 if self.flexible else self.take(fixed_fmt)

    def _slice(self, n):
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def uuid(self):
        return bytes(self._slice(16))

    def string(self):
        n = self._length(">h")
        return None if n < 0 else self._slice(n).decode()

    def bytes(self):
        n = self._length(">i")
        return None if n < 0 else self._slice(n)

    def array(self, read_item):
        n = self._length(">i")
        return None if n < 0 else [read_item(self) for _ in range(n)]

    def tags(self):
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.pos += self.uvarint()

    def done(self):
        return self.pos == len(self.data)


def parse_produce_response(payload, version):
    """{(topic, partition): {"error": code, "base_offset": n, ...}} of a v0..v8 answer."""
    r = ApiReader(payload)
    out = {}
    for _ in range(r.take(">i")):
        topic = r.string()
        for _ in range(r.take(">i")):
            index, error, base_offset = r.take(">ihq")
            entry = {"error": error, "base_offset": base_offset}
            if version >= 2:
                entry["log_append_time"] = r.take(">q")
            if version >= 5:
                entry["log_start_offset"] = r.take(">q")
            if version >= 8:
                entry["record_errors"] = [(r.take(">i"), r.string()) for _ in range(r.take(">i"))]
                entry["error_message"] = r.string()
            out[(topic, index)] = entry
    if version >= 1:
        r.take(">i")  # throttle time
    if r.pos != len(payload):
        raise AssertionError(
            f"{len(payload) - r.pos} bytes left over in a Produce v{version} answer")
    return out


class Connection:
    """One client connection; requests are sent and answered one at a time."""

    def __init__(self, bootstrap, timeout=30):
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.correlation_id = 100

    def request(self, api_key, version, body, expect_response=True, flexible=False):
        """The answer's body (after the correlation id), or None."""
        self.correlation_id += 1
        send_request(self.sock, api_key, version, self.correlation_id, bytes(body),
                     flexible=flexible)
        if not expect_response:
            return None
        corr, payload = read_response(self.sock)
        if corr != self.correlation_id:
            raise AssertionError(f"answer to correlation id {corr}, expected {self.correlation_id}")
        return payload

    def call(self, api_key, version, w):
        """Sends the ApiWriter `w`'s body; an ApiReader on the answer's body. Headers are
        flexible (v2 request, v1 response) when `w` is, which holds for every API but
        ApiVersions v3+ (its response header stays v0)."""
        r = ApiReader(self.request(api_key, version, w.buf, flexible=w.flexible), w.flexible)
        r.tags()  # response header v1
        return r

    def produce(self, version, acks, topic, partition_records, timeout_ms=10000,
                transactional_id=None):
        payload = self.request(PRODUCE, version,
                               produce_body(version, acks, timeout_ms, topic, partition_records,
                                            transactional_id))
        return parse_produce_response(payload, version)

    def fetch(self, topic, partition, offset, max_wait_ms=100, max_bytes=1 << 20):
        """Fetch v4 of one partition: (error, high watermark, record bytes)."""
        answer = self.fetch_partitions(topic, [(partition, offset, max_bytes)], max_wait_ms,
                                       max_bytes)
        return answer[0][1:]

    def fetch_partitions(self, topic, partitions, max_wait_ms=100, max_bytes=1 << 20):
        """Fetch v4 of [(partition, offset, partition max bytes)] in that order:
        [(partition, error, high watermark, record bytes)] in the answer's order."""
        body = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0) + struct.pack(">i", 1) + \
            _string(topic) + struct.pack(">i", len(partitions)) + \
            b"".join(struct.pack(">iqi", p, offset, limit) for p, offset, limit in partitions)
        r = ApiReader(self.request(FETCH, 4, body))
        r.take(">i")  # throttle time
        result = []
        for _ in range(r.take(">i")):
            name = r.string()
            for _ in range(r.take(">i")):
                index, error, high_watermark, _last_stable = r.take(">ihqq")
                aborted = r.take(">i")
                for _ in range(max(aborted, 0)):
                    r.take(">qq")
                records = r.bytes() or b""
                if name == topic:
                    result.append((index, error, high_watermark, records))
        if [p for p, _, _, _ in result] != [p for p, _, _ in partitions]:
            raise AssertionError(f"the Fetch answer holds {topic} partitions "
                                 f"{[p for p, _, _, _ in result]}, not the ones asked for")
        return result

    def fetch_session(self, session_id, epoch, topics=(), forgotten=(), max_wait_ms=0,
                      min_bytes=1, max_bytes=1 << 20):
        """Fetch v7 with session fields. topics: [(topic, [(partition, offset, max bytes)])];
        forgotten: [(topic, [partition])]. Answers (error, session id, [(topic, partition,
        error, high watermark, log start offset, record bytes)]) in the answer's order."""
        body = struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, 0, session_id,
                           epoch)
        body += struct.pack(">i", len(topics))
        for topic, partitions in topics:
            body += _string(topic) + struct.pack(">i", len(partitions)) + b"".join(
                struct.pack(">iqqi", p, offset, -1, limit) for p, offset, limit in partitions)
        body += struct.pack(">i", len(forgotten))
        for topic, partitions in forgotten:
            body += _string(topic) + struct.pack(">i", len(partitions)) + b"".join(
                struct.pack(">i", p) for p in partitions)
        r = ApiReader(self.request(FETCH, 7, body))
        _throttle, error, answered_session = r.take(">ihi")
        result = []
        for _ in range(r.take(">i")):
            name = r.string()
            for _ in range(r.take(">i")):
                index, p_error, high_watermark, _last_stable, log_start = r.take(">ihqqq")
                for _ in range(max(r.take(">i"), 0)):  # aborted transactions
                    r.take(">qq")
                result.append((name, index, p_error, high_watermark, log_start,
                               r.bytes() or b""))
        return error, answered_session, result

    def api_versions(self):
        """{api key: (min version, max version)} the broker advertises (ApiVersions v0)."""
        r = self.call(API_VERSIONS, 0, ApiWriter())
        error = r.i16()
        if error != 0:
            raise AssertionError(f"ApiVersions error {error}")
        return {k: (lo, hi) for k, lo, hi in r.array(lambda r: r.take(">hhh"))}

    def api_keys(self):
        return set(self.api_versions())

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def batch_headers(records):
    """The batch headers in fetched record bytes: [{base_offset, count, codec, ...}].
    A partial batch at the end (cut by max bytes) is left out."""
    out = []
    pos = 0
    while pos + 61 <= len(records):
        base_offset, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break
        magic = records[pos + 16]
        attributes, last_offset_delta = struct.unpack_from(">hi", records, pos + 21)
        first_ts, max_ts = struct.unpack_from(">qq", records, pos + 27)
        (count,) = struct.unpack_from(">i", records, pos + 57)
        out.append({"base_offset": base_offset, "magic": magic, "codec": attributes & 7,
                    "timestamp_type": (attributes >> 3) & 1, "last_offset_delta": last_offset_delta,
                    "count": count, "first_timestamp": first_ts, "max_timestamp": max_ts})
        pos += 12 + length
    return out
