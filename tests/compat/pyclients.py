"""confluent-kafka 2.x and kafka-python 3.x (from PyPI, in the venv that scripts/peers/clients
makes) driven by tests/compat/test_python_clients.py: one JSON request per line on stdin,
{"op": "produce", "topic": "t", "count": 10}, one JSON answer per line on stdout,
{"ok": true, ...} or {"ok": false, "error": "...", "message": "..."}.

  VENV/bin/python pyclients.py --client confluent|kafka-python --bootstrap 127.0.0.1:9092

Producers and consumers get the client's defaults except what a request's "props" say (as the
client spells its settings: librdkafka's for confluent, keyword arguments for kafka-python),
with shorter timeouts than the defaults. Topic partitions are written "topic:partition".
"""
import argparse
import json
import sys
import time
import traceback


def name(topic, partition):
    return f"{topic}:{partition}"


def split(tp):
    topic, partition = tp.rsplit(":", 1)
    return topic, int(partition)


def enum_name(value):
    return getattr(value, "name", None) if value is not None else None


class Confluent:
    def __init__(self, bootstrap):
        import confluent_kafka
        from confluent_kafka import admin
        self.ck = confluent_kafka
        self.admin_mod = admin
        self.bootstrap = bootstrap
        self.admin = admin.AdminClient({"bootstrap.servers": bootstrap,
                                        "client.id": "pyclients-confluent-admin"})

    def versions(self):
        return {"client": self.ck.version()[0], "librdkafka": self.ck.libversion()[0]}

    def produce(self, req):
        conf = {"bootstrap.servers": self.bootstrap, "client.id": "pyclients-confluent",
                "message.timeout.ms": 20000, "socket.timeout.ms": 10000}
        conf.update(req.get("props", {}))
        producer = self.ck.Producer(conf)
        results = [None] * req["count"]
        errors = []

        def delivered(i):
            def cb(err, msg):
                if err is not None:
                    errors.append(err)
                else:
                    results[i] = [msg.partition(), msg.offset()]
            return cb

        keys = req.get("keys", 4)
        for i in range(req["count"]):
            key = f"k{i % keys}" if req.get("keyed", True) else None
            producer.produce(req["topic"], key=key,
                             value=f"{req.get('value_prefix', 'v')}{i}", on_delivery=delivered(i))
            producer.poll(0)
        left = producer.flush(30)
        if errors:
            raise self.ck.KafkaException(errors[0])
        if left:
            raise TimeoutError(f"{left} records not delivered in 30 s")
        return {"records": results}

    def consume(self, req):
        conf = {"bootstrap.servers": self.bootstrap, "group.id": req["group"],
                "client.id": req.get("client_id", "pyclients-confluent"),
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        conf.update(req.get("props", {}))
        consumer = self.ck.Consumer(conf)
        records = []
        try:
            consumer.subscribe(req["topics"])
            deadline = time.monotonic() + req.get("timeout_ms", 30000) / 1000
            while len(records) < req["count"] and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    raise self.ck.KafkaException(msg.error())
                records.append({"topic": msg.topic(), "p": msg.partition(), "o": msg.offset(),
                                "k": msg.key().decode() if msg.key() is not None else None,
                                "v": msg.value().decode()})
            if req.get("commit", True) and records:
                consumer.commit(asynchronous=False)
            assignment = consumer.assignment()
            committed = consumer.committed(assignment, timeout=30)
            answer = {
                "records": records,
                "assignment": sorted(name(tp.topic, tp.partition) for tp in assignment),
                "committed": {name(tp.topic, tp.partition): tp.offset
                              for tp in committed if tp.offset >= 0},
                "member_id": consumer.memberid(),
            }
        finally:
            consumer.close()
        return answer

    def create_topics(self, req):
        new = [self.admin_mod.NewTopic(t["name"], num_partitions=t.get("partitions", -1),
                                       config=t.get("configs", {})) for t in req["topics"]]
        errors = {}
        for topic, future in self.admin.create_topics(new, request_timeout=20).items():
            try:
                future.result(timeout=30)
                errors[topic] = None
            except Exception as e:  # noqa: BLE001 - each topic's own outcome
                errors[topic] = failure(e)
        return {"errors": errors}

    def list_groups(self, req):
        result = self.admin.list_consumer_groups(request_timeout=20).result(timeout=30)
        return {"groups": {g.group_id: {"state": enum_name(getattr(g, "state", None)),
                                        "type": enum_name(getattr(g, "type", None)),
                                        "simple": g.is_simple_consumer_group}
                           for g in result.valid},
                "errors": [str(e) for e in result.errors]}

    def describe_groups(self, req):
        groups = {}
        for group, future in self.admin.describe_consumer_groups(
                req["groups"], request_timeout=20).items():
            try:
                d = future.result(timeout=30)
                groups[group] = {
                    "state": enum_name(d.state), "type": enum_name(getattr(d, "type", None)),
                    "assignor": d.partition_assignor, "simple": d.is_simple_consumer_group,
                    "coordinator": d.coordinator.id if d.coordinator else -1,
                    "members": [{"member_id": m.member_id, "client_id": m.client_id,
                                 "host": m.host,
                                 "assignment": sorted(name(tp.topic, tp.partition)
                                                      for tp in m.assignment.topic_partitions)}
                                for m in d.members]}
            except Exception as e:  # noqa: BLE001
                groups[group] = failure(e)
        return {"groups": groups}

    def list_group_offsets(self, req):
        spec = self.ck.ConsumerGroupTopicPartitions(req["group"])
        futures = self.admin.list_consumer_group_offsets([spec], request_timeout=20)
        result = futures[req["group"]].result(timeout=30)
        return {"offsets": {name(tp.topic, tp.partition): tp.offset
                            for tp in result.topic_partitions if tp.offset >= 0}}

    def list_offsets(self, req):
        spec = {"earliest": self.admin_mod.OffsetSpec.earliest(),
                "latest": self.admin_mod.OffsetSpec.latest()}[req.get("spec", "latest")]
        futures = self.admin.list_offsets(
            {self.ck.TopicPartition(*split(tp)): spec for tp in req["partitions"]},
            request_timeout=20)
        return {"offsets": {name(tp.topic, tp.partition): f.result(timeout=30).offset
                            for tp, f in futures.items()}}


class KafkaPython:
    def __init__(self, bootstrap):
        import kafka
        from kafka import admin
        self.kafka = kafka
        self.admin_mod = admin
        self.bootstrap = bootstrap
        self.admin = admin.KafkaAdminClient(bootstrap_servers=bootstrap,
                                            client_id="pyclients-kafka-python-admin",
                                            request_timeout_ms=20000)

    def versions(self):
        return {"client": self.kafka.__version__}

    def produce(self, req):
        kw = {"bootstrap_servers": self.bootstrap, "client_id": "pyclients-kafka-python",
              "max_block_ms": 20000,
              "request_timeout_ms": 10000, "delivery_timeout_ms": 20000}
        kw.update(req.get("props", {}))
        producer = self.kafka.KafkaProducer(**kw)
        try:
            keys = req.get("keys", 4)
            futures = [producer.send(req["topic"],
                                     key=f"k{i % keys}".encode() if req.get("keyed", True)
                                     else None,
                                     value=f"{req.get('value_prefix', 'v')}{i}".encode())
                       for i in range(req["count"])]
            producer.flush(timeout=30)
            records = []
            for f in futures:
                md = f.get(timeout=30)
                records.append([md.partition, md.offset])
        finally:
            producer.close(timeout=10)
        return {"records": records}

    def txn_produce(self, req):
        """One transactional producer (transactional_id) runs req["transactions"] in turn: the
        t-th, {"count": n, "commit": bool}, sends n records "<t>:<i>" to partition
        i % req["partitions"] and the offset t + 1 of "<topic>:0" for req["group"]
        (send_offsets_to_transaction), then commits or aborts. Answers each committed
        transaction's [partition, offset] per record."""
        kw = {"bootstrap_servers": self.bootstrap, "client_id": "pyclients-kafka-python",
              "max_block_ms": 20000, "request_timeout_ms": 10000, "delivery_timeout_ms": 20000,
              "transactional_id": req["transactional_id"]}
        kw.update(req.get("props", {}))
        producer = self.kafka.KafkaProducer(**kw)
        topic, committed = req["topic"], []
        try:
            producer.init_transactions()
            for t, txn in enumerate(req["transactions"]):
                producer.begin_transaction()
                futures = [producer.send(topic, value=f"{t}:{i}".encode(),
                                         partition=i % req["partitions"])
                           for i in range(txn["count"])]
                producer.flush(timeout=30)  # written before the end: an abort has work to do
                producer.send_offsets_to_transaction(
                    {self.kafka.TopicPartition(topic, 0):
                     self.kafka.OffsetAndMetadata(t + 1, "", -1)}, req["group"])
                if txn["commit"]:
                    producer.commit_transaction()
                    committed.append([[f.get(timeout=30).partition, f.get(timeout=30).offset]
                                      for f in futures])
                else:
                    producer.abort_transaction()
        finally:
            producer.close(timeout=10)
        return {"committed": committed}

    def consume(self, req):
        kw = {"bootstrap_servers": self.bootstrap, "group_id": req["group"],
              "client_id": req.get("client_id", "pyclients-kafka-python"),
              "auto_offset_reset": "earliest", "enable_auto_commit": False,
              "request_timeout_ms": 30000}
        kw.update(req.get("props", {}))
        consumer = self.kafka.KafkaConsumer(**kw)
        records = []
        try:
            consumer.subscribe(req["topics"])
            deadline = time.monotonic() + req.get("timeout_ms", 30000) / 1000
            while len(records) < req["count"] and time.monotonic() < deadline:
                for tp_records in consumer.poll(timeout_ms=500).values():
                    for r in tp_records:
                        records.append({"topic": r.topic, "p": r.partition, "o": r.offset,
                                        "k": r.key.decode() if r.key is not None else None,
                                        "v": r.value.decode()})
            if req.get("commit", True) and records:
                consumer.commit()
            assignment = consumer.assignment()
            committed = {}
            for tp in assignment:
                o = consumer.committed(tp)
                if o is not None:
                    committed[name(tp.topic, tp.partition)] = o
            answer = {"records": records,
                      "assignment": sorted(name(tp.topic, tp.partition) for tp in assignment)}
            answer["committed"] = committed
        finally:
            consumer.close()
        return answer

    def create_topics(self, req):
        new = {t["name"]: {"num_partitions": t.get("partitions", -1),
                           "replication_factor": t.get("replication_factor", -1),
                           "configs": t.get("configs", {})} for t in req["topics"]}
        result = self.admin.create_topics(new, timeout_ms=20000, raise_errors=False)
        errors = {}
        for t in result["topics"]:
            code = t.get("error_code", 0)
            errors[t["name"]] = None if not code else {
                "ok": False, "error": self.kafka.errors.for_code(code).__name__,
                "message": t.get("error_message")}
        return {"errors": errors}

    def list_groups(self, req):
        return {"groups": {g["group_id"]: {"state": g.get("group_state"),
                                           "type": g.get("group_type"),
                                           "protocol_type": g.get("protocol_type")}
                           for g in self.admin.list_groups()}}

    def describe_groups(self, req):
        groups = {}
        for group, d in self.admin.describe_groups(req["groups"]).items():
            members = []
            for m in d.get("members", []):
                assignment = m.get("member_assignment") or {}
                tps = []
                if isinstance(assignment, dict):
                    for t in assignment.get("assigned_partitions", []):
                        tps += [name(t["topic"], p) for p in t["partitions"]]
                members.append({"member_id": m["member_id"], "client_id": m["client_id"],
                                "host": m["client_host"], "assignment": sorted(tps)})
            groups[group] = {"state": d.get("group_state"), "protocol_type": d.get("protocol_type"),
                             "assignor": d.get("protocol_data"), "members": members}
        return {"groups": groups}

    def list_group_offsets(self, req):
        result = self.admin.list_group_offsets({req["group"]: None})[req["group"]]
        return {"offsets": {name(tp.topic, tp.partition): om.offset
                            for tp, om in result.items() if om.offset >= 0}}

    def list_offsets(self, req):
        spec = {"earliest": self.admin_mod.OffsetSpec.EARLIEST,
                "latest": self.admin_mod.OffsetSpec.LATEST}[req.get("spec", "latest")]
        result = self.admin.list_partition_offsets(
            {self.kafka.TopicPartition(*split(tp)): spec for tp in req["partitions"]})
        return {"offsets": {name(tp.topic, tp.partition): o.offset for tp, o in result.items()}}


def self_kafka_exception():
    import confluent_kafka
    return confluent_kafka.KafkaException


def failure(e):
    """An exception as an answer: its class, and the Kafka error's name where it has one."""
    if isinstance(e, SystemError) and e.__cause__ is not None:
        # confluent-kafka raising a fatal error from flush() still runs the delivery
        # callbacks, which then fail with SystemError; the fatal error is the cause.
        e = e.__cause__
    answer = {"ok": False, "error": type(e).__name__, "message": str(e)}
    try:
        if isinstance(e, self_kafka_exception()) and e.args and hasattr(e.args[0], "name"):
            answer["kafka_error"] = e.args[0].name()
            answer["message"] = e.args[0].str()
    except ImportError:
        pass
    return answer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=["confluent", "kafka-python"], required=True)
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args()
    out = sys.stdout
    sys.stdout = sys.stderr  # the answers alone on stdout
    client = (Confluent if args.client == "confluent" else KafkaPython)(args.bootstrap)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "versions":
                answer = client.versions()
            elif op in ("produce", "txn_produce", "consume", "create_topics", "list_groups",
                        "describe_groups", "list_group_offsets", "list_offsets"):
                answer = getattr(client, op)(req)
            else:
                raise ValueError(f"unknown op {op!r}")
            answer["ok"] = True
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            traceback.print_exc()
            answer = failure(e)
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
