"""A librdkafka (python3-confluent-kafka) group consumer as a process of its own, so a test
can close it cleanly or kill -9 it. Driven by test_groups.py.

    python3 group_consumer.py '<json options>'

Options: bootstrap, topic, group, conf (more librdkafka properties), max_records (stop
processing after this many records, commit them and close), commit_interval_ms (how often
processed records are committed; 0: after every record).

Prints one JSON object a line on stdout, flushed at once:
    {"ev": "assign"|"revoke"|"lost", "parts": [p, ...], "t": <monotonic s>}
    {"ev": "rec", "p": p, "o": offset}              a record processed (printed = processed)
    {"ev": "commit", "offsets": {"p": next offset}}  a commit the broker accepted
    {"ev": "commit_error", "error": "...", "offsets": {...}}
    {"ev": "error", "error": "..."}                  a consumer error event
    {"ev": "closed"}
Reads commands on stdin: "close" (or end of input) commits what was processed and closes the
consumer, which leaves the group. Processing is "commit after processing": a record is
printed before any commit covers it, so a record printed and not committed when the process
dies is the at-least-once window.
"""
import json
import os
import select
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition


def emit(obj):
    obj.setdefault("t", time.monotonic())
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    opts = json.loads(sys.argv[1])
    topic = opts["topic"]
    conf = {"bootstrap.servers": opts["bootstrap"], "group.id": opts["group"],
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False}
    conf.update(opts.get("conf", {}))
    consumer = Consumer(conf)
    processed = {}  # partition -> next offset to commit (last processed + 1)
    committed = {}  # partition -> what the broker last accepted
    max_records = opts.get("max_records")
    interval = opts.get("commit_interval_ms", 100) / 1000.0
    count = 0

    def commit(parts=None):
        todo = {p: o for p, o in processed.items()
                if (parts is None or p in parts) and committed.get(p) != o}
        if not todo:
            return
        offsets = [TopicPartition(topic, p, o) for p, o in sorted(todo.items())]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as e:  # KafkaException: the whole commit failed
            emit({"ev": "commit_error", "error": str(e), "offsets": todo})
            return
        ok = {}
        for tp in result or []:
            if tp.error is None:
                ok[tp.partition] = tp.offset
            else:
                emit({"ev": "commit_error", "error": str(tp.error),
                      "offsets": {tp.partition: tp.offset}})
        committed.update(ok)
        if ok:
            emit({"ev": "commit", "offsets": ok})

    def on_assign(c, partitions):
        emit({"ev": "assign", "parts": sorted(tp.partition for tp in partitions)})

    def on_revoke(c, partitions):
        parts = {tp.partition for tp in partitions}
        # Commit what was processed before the partitions go to another member.
        commit(parts)
        for p in parts:
            processed.pop(p, None)
            committed.pop(p, None)
        emit({"ev": "revoke", "parts": sorted(parts)})

    def on_lost(c, partitions):
        parts = {tp.partition for tp in partitions}
        for p in parts:
            processed.pop(p, None)
            committed.pop(p, None)
        emit({"ev": "lost", "parts": sorted(parts)})

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit({"ev": "start", "pid": os.getpid()})
    last_commit = time.monotonic()
    stdin_open = True
    while True:
        if stdin_open and select.select([sys.stdin], [], [], 0)[0]:
            line = sys.stdin.readline()
            if not line or line.strip() == "close":
                break
        if max_records is not None and count >= max_records:
            break
        # poll() hands out one record at a time and runs the rebalance callbacks between
        # records, so a record is never processed after its partition was revoked.
        msg = consumer.poll(0.1)
        if msg is not None:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    emit({"ev": "error", "error": str(msg.error())})
            else:
                emit({"ev": "rec", "p": msg.partition(), "o": msg.offset()})
                processed[msg.partition()] = msg.offset() + 1
                count += 1
        now = time.monotonic()
        if msg is None or now - last_commit >= interval or (
                max_records is not None and count >= max_records):
            commit()
            last_commit = now
    commit()
    consumer.close()
    emit({"ev": "closed"})


if __name__ == "__main__":
    main()
