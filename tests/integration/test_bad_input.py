"""Hostile and odd bytes on the Kafka port close only that connection; versions are
negotiated as Kafka does; pipelined requests are answered in order."""
import socket
import struct
import subprocess
import unittest

from harness import Node, read_response, recv_exact, send_request


def closed_by_peer(sock, timeout=10):
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = Node().start()

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.node.port), timeout=10)

    def assert_healthy(self):
        out = subprocess.run(["kcat", "-L", "-b", self.node.bootstrap, "-m", "10"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("broker 1 at", out.stdout)

    def metadata_roundtrip(self, sock, corr):
        send_request(sock, 3, 1, corr, struct.pack(">i", -1))
        got, _ = read_response(sock)
        self.assertEqual(got, corr)

    def check_closes_only_that_connection(self, payload):
        bystander = self.connect()
        self.metadata_roundtrip(bystander, 1)
        bad = self.connect()
        bad.sendall(payload)
        self.assertTrue(closed_by_peer(bad))
        bad.close()
        self.metadata_roundtrip(bystander, 2)  # the other connection is untouched
        bystander.close()
        self.assert_healthy()

    def test_garbage_bytes(self):
        self.check_closes_only_that_connection(b"\x00\x00\x00\x10" + bytes(range(16)))

    def test_http_request(self):
        self.check_closes_only_that_connection(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")

    def test_two_gib_size_prefix(self):
        self.check_closes_only_that_connection(struct.pack(">I", 0x80000000) + b"\x00" * 8)

    def test_size_over_socket_request_max_bytes(self):
        self.check_closes_only_that_connection(struct.pack(">i", 200 * 1024 * 1024) + b"\x00")

    def test_truncated_frame_then_close(self):
        bystander = self.connect()
        bad = self.connect()
        bad.sendall(struct.pack(">i", 100) + b"\x00\x03\x00\x01")
        bad.close()
        self.metadata_roundtrip(bystander, 3)
        bystander.close()
        self.assert_healthy()

    def test_truncated_body(self):
        # A Metadata v1 frame whose topic array claims 1000 entries that are not there.
        self.check_closes_only_that_connection(
            struct.pack(">i", 14) + struct.pack(">hhih", 3, 1, 9, 0) + struct.pack(">i", 1000))

    def test_unknown_api_key(self):
        s = self.connect()
        send_request(s, 999, 0, 5, b"")
        self.assertTrue(closed_by_peer(s))
        self.assert_healthy()

    def test_api_versions_unsupported_version_gets_v0_answer(self):
        s = self.connect()
        # ApiVersions v99 (flexible header): answered, not dropped.
        send_request(s, 18, 99, 42, b"\x00", flexible=True)
        corr, body = read_response(s)
        self.assertEqual(corr, 42)
        (error_code, count) = struct.unpack(">hi", body[:6])
        self.assertEqual(error_code, 35)  # UNSUPPORTED_VERSION
        apis = {}
        for i in range(count):
            key, lo, hi = struct.unpack(">hhh", body[6 + 6 * i: 12 + 6 * i])
            apis[key] = (lo, hi)
        self.assertEqual(apis[18], (0, 5))
        self.assertEqual(apis[3], (0, 13))
        # The connection stays usable.
        self.metadata_roundtrip(s, 43)
        s.close()

    def test_api_versions_v3_lists_apis(self):
        s = self.connect()
        name, version = b"runnel-test", b"1.0"
        body = bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"
        send_request(s, 18, 3, 8, body, flexible=True)
        corr, resp = read_response(s)  # response header v0 even for v3
        self.assertEqual(corr, 8)
        self.assertEqual(struct.unpack(">h", resp[:2])[0], 0)
        s.close()

    def describe_cluster_v2(self, s, corr, include_fenced):
        """DescribeCluster v2: (cluster id, [(broker id, host, port, is_fenced)])."""
        send_request(s, 60, 2, corr, b"\x00\x01" + bytes([include_fenced]) + b"\x00",
                     flexible=True)
        rcorr, body = read_response(s)
        self.assertEqual(rcorr, corr)
        pos = 1 + 4  # response header tags, throttle_time_ms
        (error_code,) = struct.unpack_from(">h", body, pos)
        self.assertEqual(error_code, 0)
        pos += 2 + 1 + 1  # error_message (null), endpoint_type
        cluster_len = body[pos] - 1
        cluster_id = body[pos + 1: pos + 1 + cluster_len].decode()
        pos += 1 + cluster_len + 4  # controller id
        brokers = []
        count = body[pos] - 1
        pos += 1
        for _ in range(count):
            (broker_id,) = struct.unpack_from(">i", body, pos)
            pos += 4
            host_len = body[pos] - 1
            host = body[pos + 1: pos + 1 + host_len].decode()
            pos += 1 + host_len
            (port,) = struct.unpack_from(">i", body, pos)
            pos += 4
            self.assertEqual(body[pos], 0)  # rack: null
            pos += 1
            fenced = body[pos]
            pos += 1
            self.assertEqual(body[pos], 0)  # the broker's tagged fields
            pos += 1
            brokers.append((broker_id, host, port, fenced))
        return cluster_id, brokers

    def test_describe_cluster_v2(self):
        # IncludeFencedBrokers (KIP-1073): the one broker is unfenced either way.
        s = self.connect()
        for corr, include_fenced in ((21, 0), (22, 1)):
            _, brokers = self.describe_cluster_v2(s, corr, include_fenced)
            self.assertEqual(brokers, [(1, "127.0.0.1", self.node.port, 0)])
        s.close()

    def api_versions_v5(self, s, corr, cluster_id, node_id):
        """ApiVersions v5 naming `cluster_id` (None: null) and `node_id`: (error, api keys)."""
        name, version = b"runnel-test", b"1.0"
        body = bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version
        if cluster_id is None:
            body += b"\x00"
        else:
            body += bytes([len(cluster_id) + 1]) + cluster_id.encode()
        body += struct.pack(">i", node_id) + b"\x00"
        send_request(s, 18, 5, corr, body, flexible=True)
        rcorr, resp = read_response(s)  # response header v0 even for v5
        self.assertEqual(rcorr, corr)
        (error_code,) = struct.unpack_from(">h", resp, 0)
        keys = []
        pos = 3
        for _ in range(resp[2] - 1):
            keys.append(struct.unpack_from(">hhh", resp, pos)[0])
            pos += 7  # key, min, max, tagged fields
        return error_code, keys

    def test_api_versions_v5_checks_the_cluster(self):
        # KIP-1242: a client naming the cluster it expects is told to rebootstrap (129,
        # REBOOTSTRAP_REQUIRED, no API list) unless cluster id and node id are this broker's.
        s = self.connect()
        cluster_id, _ = self.describe_cluster_v2(s, 30, 0)
        error, keys = self.api_versions_v5(s, 31, None, -1)
        self.assertEqual(error, 0)
        self.assertIn(18, keys)
        error, keys = self.api_versions_v5(s, 32, cluster_id, 1)
        self.assertEqual(error, 0)
        self.assertIn(3, keys)
        for corr, (cid, node) in enumerate([("AAAAAAAAAAAAAAAAAAAAAA", 1), (cluster_id, 2),
                                            (cluster_id, -1)], start=33):
            self.assertEqual(self.api_versions_v5(s, corr, cid, node), (129, []),
                             f"{cid} / {node}")
        # The connection stays usable.
        self.metadata_roundtrip(s, 40)
        s.close()

    def test_describe_cluster(self):
        s = self.connect()
        # DescribeCluster v1 (flexible): include_cluster_authorized_operations=true,
        # endpoint_type=1 (brokers), no tagged fields.
        send_request(s, 60, 1, 11, b"\x01\x01\x00", flexible=True)
        corr, body = read_response(s)
        self.assertEqual(corr, 11)
        self.assertEqual(body[0], 0)  # response header v1: no tagged fields
        pos = 1 + 4  # throttle_time_ms
        (error_code,) = struct.unpack_from(">h", body, pos)
        self.assertEqual(error_code, 0)
        pos += 2
        self.assertEqual(body[pos], 0)  # error_message: null
        pos += 1
        self.assertEqual(body[pos], 1)  # endpoint_type
        pos += 1
        cluster_len = body[pos] - 1
        pos += 1 + cluster_len
        self.assertEqual(cluster_len, 22)  # Kafka's base64 uuid form
        (controller_id,) = struct.unpack_from(">i", body, pos)
        self.assertEqual(controller_id, 1)
        pos += 4
        self.assertEqual(body[pos] - 1, 1)  # one broker
        pos += 1
        (broker_id,) = struct.unpack_from(">i", body, pos)
        self.assertEqual(broker_id, 1)
        pos += 4
        host_len = body[pos] - 1
        self.assertEqual(body[pos + 1: pos + 1 + host_len], b"127.0.0.1")
        pos += 1 + host_len
        (port,) = struct.unpack_from(">i", body, pos)
        self.assertEqual(port, self.node.port)
        s.close()

    def test_describe_cluster_for_controllers_is_refused(self):
        s = self.connect()
        send_request(s, 60, 1, 12, b"\x00\x02\x00", flexible=True)  # endpoint_type=2
        corr, body = read_response(s)
        (error_code,) = struct.unpack_from(">h", body, 1 + 4)
        self.assertEqual(error_code, 115)  # UNSUPPORTED_ENDPOINT_TYPE
        s.close()

    def test_pipelined_requests_answered_in_order(self):
        s = self.connect()
        frames = b""
        for corr in range(100, 140):
            header = struct.pack(">hhih", 3, 1, corr, 2) + b"it"
            frame = header + struct.pack(">i", -1)
            frames += struct.pack(">i", len(frame)) + frame
        s.sendall(frames)
        got = [read_response(s)[0] for _ in range(40)]
        self.assertEqual(got, list(range(100, 140)))
        s.close()


if __name__ == "__main__":
    unittest.main()
