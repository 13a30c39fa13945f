// Apache Kafka's Java client (kafka-clients 4.4, from scripts/peers/kafka's cache) driven by the
// compat tests (tests/compat/test_java_client.py): one request per line on stdin, a JSON object
// such as {"op": "produce", "topic": "t", "count": 10}; one answer per line on stdout,
// {"ok": true, ...} or {"ok": false, "error": "ExceptionClass", "message": "..."}.
//
//   java -cp CLASSES:KAFKA_CLASSPATH ClientCheck --bootstrap 127.0.0.1:9092
//
// Built by scripts/peers/clients into its cache (never into the tree). Producers and consumers
// get the client's defaults except what a request's "props" say, and shorter timeouts than the
// defaults (so a broker that cannot answer fails a test in seconds, not minutes). One Admin
// client serves every admin request. Topic partitions are written "topic:partition".
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ClientCheck {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int TIMEOUT_S = 30; // the longest wait of one future

  private final String bootstrap;
  private Admin admin;
  private final Map<String, Member> members = new HashMap<>();

  private ClientCheck(String bootstrap) {
    this.bootstrap = bootstrap;
  }

  public static void main(String[] args) throws Exception {
    String bootstrap = null;
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (args[i].equals("--bootstrap")) bootstrap = args[i + 1];
    }
    if (bootstrap == null) {
      System.err.println("usage: ClientCheck --bootstrap HOST:PORT  (requests on stdin)");
      System.exit(2);
    }
    // The answers alone go to stdout; whatever else prints (the client's logs) goes to stderr.
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    System.setOut(System.err);
    ClientCheck check = new ClientCheck(bootstrap);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) continue;
      ObjectNode answer;
      try {
        answer = check.handle(JSON.readTree(line));
        answer.put("ok", true);
      } catch (Throwable e) {
        answer = error(e);
      }
      out.println(JSON.writeValueAsString(answer));
    }
    check.close();
  }

  private static ObjectNode error(Throwable e) {
    Throwable t = e;
    while ((t instanceof ExecutionException || t instanceof CompletionException)
        && t.getCause() != null) {
      t = t.getCause();
    }
    ObjectNode answer = JSON.createObjectNode();
    answer.put("ok", false);
    answer.put("error", t.getClass().getSimpleName());
    answer.put("message", String.valueOf(t.getMessage()));
    if (t.getCause() != null && t.getCause() != t) {
      answer.put("cause", t.getCause().getClass().getSimpleName() + ": " + t.getCause().getMessage());
    }
    return answer;
  }

  private void close() {
    for (Member m : members.values()) m.stop();
    if (admin != null) admin.close(Duration.ofSeconds(10));
  }

  private ObjectNode handle(JsonNode req) throws Exception {
    String op = req.path("op").asText();
    switch (op) {
      case "produce": return produce(req);
      case "transactions": return transactions(req);
      case "consume": return consume(req);
      case "member_start": return memberStart(req);
      case "member_stop": return memberStop(req);
      case "create_topics": return createTopics(req);
      case "delete_topics": return deleteTopics(req);
      case "list_topics": return listTopics(req);
      case "describe_topics": return describeTopics(req);
      case "create_partitions": return createPartitions(req);
      case "describe_configs": return describeConfigs(req);
      case "alter_configs": return alterConfigs(req);
      case "list_groups": return listGroups(req);
      case "describe_groups": return describeGroups(req);
      case "delete_groups": return deleteGroups(req);
      case "list_group_offsets": return listGroupOffsets(req);
      case "alter_group_offsets": return alterGroupOffsets(req);
      case "delete_records": return deleteRecords(req);
      case "list_offsets": return listOffsets(req);
      case "describe_cluster": return describeCluster(req);
      case "describe_quorum": return describeQuorum(req);
      default: throw new IllegalArgumentException("unknown op '" + op + "'");
    }
  }

  // ------------------------------------------------------------------------ helpers

  private static Properties props(JsonNode req, Map<String, String> defaults) {
    Properties p = new Properties();
    p.putAll(defaults);
    Iterator<Map.Entry<String, JsonNode>> it = req.path("props").fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> e = it.next();
      p.put(e.getKey(), e.getValue().asText());
    }
    return p;
  }

  private static TopicPartition tp(String s) {
    int i = s.lastIndexOf(':');
    return new TopicPartition(s.substring(0, i), Integer.parseInt(s.substring(i + 1)));
  }

  private static String name(TopicPartition tp) {
    return tp.topic() + ":" + tp.partition();
  }

  private static List<String> strings(JsonNode array) {
    List<String> list = new ArrayList<>();
    for (JsonNode n : array) list.add(n.asText());
    return list;
  }

  private static <T> T get(KafkaFuture<T> f) throws Exception {
    return f.get(TIMEOUT_S, TimeUnit.SECONDS);
  }

  /** Each key's own outcome: null, or the error as an object. */
  private static <K> ObjectNode outcomes(Map<K, ? extends KafkaFuture<?>> futures) {
    ObjectNode results = JSON.createObjectNode();
    for (Map.Entry<K, ? extends KafkaFuture<?>> e : futures.entrySet()) {
      String key = e.getKey() instanceof TopicPartition
          ? name((TopicPartition) e.getKey()) : String.valueOf(e.getKey());
      try {
        get(e.getValue());
        results.putNull(key);
      } catch (Exception ex) {
        results.set(key, error(ex));
      }
    }
    return results;
  }

  private static ObjectNode node(Node n) {
    ObjectNode o = JSON.createObjectNode();
    if (n == null) return o;
    o.put("id", n.id());
    o.put("host", n.host());
    o.put("port", n.port());
    if (n.rack() != null) o.put("rack", n.rack());
    return o;
  }

  private Admin admin() {
    if (admin == null) {
      Properties p = new Properties();
      p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      p.put(AdminClientConfig.CLIENT_ID_CONFIG, "clientcheck-admin");
      p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
      p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "25000");
      admin = Admin.create(p);
    }
    return admin;
  }

  // ------------------------------------------------------------------------ producer

  /** Sends count records ("k<i % keys>" keyed when keyed, values "<prefix><i>", timestamps
   *  timestamp_base + i if given) and answers the partition and offset of each, in order. */
  private ObjectNode produce(JsonNode req) throws Exception {
    Map<String, String> d = new HashMap<>();
    d.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    d.put(ProducerConfig.CLIENT_ID_CONFIG, "clientcheck-producer");
    d.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    d.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    d.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
    d.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
    d.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
    String topic = req.path("topic").asText();
    int count = req.path("count").asInt();
    boolean keyed = req.path("keyed").asBoolean(true);
    int keys = req.path("keys").asInt(4);
    String prefix = req.path("value_prefix").asText("v");
    Long timestampBase = req.has("timestamp_base") ? req.path("timestamp_base").asLong() : null;
    ArrayNodeBuilder records = new ArrayNodeBuilder();
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props(req, d))) {
      List<Future<RecordMetadata>> sent = new ArrayList<>();
      for (int i = 0; i < count; i++) {
        String key = keyed ? "k" + (i % keys) : null;
        Long ts = timestampBase == null ? null : timestampBase + i;
        sent.add(producer.send(new ProducerRecord<>(topic, null, ts, key, prefix + i)));
      }
      producer.flush();
      for (Future<RecordMetadata> f : sent) {
        RecordMetadata md = f.get(TIMEOUT_S, TimeUnit.SECONDS);
        records.add(md.partition(), md.offset());
      }
    }
    ObjectNode answer = JSON.createObjectNode();
    answer.set("records", records.node);
    return answer;
  }

  /** One transactional producer (transactional_id) runs "transactions", each {"count": n,
   *  "commit": true|false} of values "<t>-<i>" round robin over "partitions" partitions, and
   *  with "group" sends offset t + 1 of partition 0 to the transaction for that group
   *  (sendOffsetsToTransaction); then the topic is read to its end by a read_committed and a
   *  read_uncommitted consumer. Answers the values each saw, in partition then offset order,
   *  the producer's epoch and state (DescribeTransactions) and the group's committed offsets. */
  private ObjectNode transactions(JsonNode req) throws Exception {
    Map<String, String> d = new HashMap<>();
    d.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    d.put(ProducerConfig.CLIENT_ID_CONFIG, "clientcheck-txn-producer");
    d.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    d.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    d.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, req.path("transactional_id").asText());
    d.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
    String topic = req.path("topic").asText();
    int partitions = req.path("partitions").asInt(1);
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props(req, d))) {
      producer.initTransactions();
      int t = 0;
      for (JsonNode txn : req.path("transactions")) {
        producer.beginTransaction();
        for (int i = 0; i < txn.path("count").asInt(); i++) {
          producer.send(new ProducerRecord<>(topic, i % partitions, null, t + "-" + i));
        }
        if (req.has("group")) {
          producer.sendOffsetsToTransaction(
              Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(t + 1)),
              new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(
                  req.path("group").asText()));
        }
        producer.flush();  // sent before the end, so an aborted transaction's records are stored
        if (txn.path("commit").asBoolean()) {
          producer.commitTransaction();
        } else {
          producer.abortTransaction();
        }
        t++;
      }
    }
    ObjectNode answer = JSON.createObjectNode();
    for (String isolation : List.of("read_committed", "read_uncommitted")) {
      Map<String, String> c = new HashMap<>();
      c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
      c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
      c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
      com.fasterxml.jackson.databind.node.ArrayNode values = answer.putArray(isolation);
      try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props(req, c))) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
        consumer.assign(tps);
        consumer.seekToBeginning(tps);
        Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(TIMEOUT_S));
        Map<Integer, List<String>> byPartition = new TreeMap<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
        while (System.nanoTime() < deadline) {
          boolean done = true;
          for (TopicPartition tp : tps) done &= consumer.position(tp) >= end.get(tp);
          if (done) break;
          for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
            byPartition.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
          }
        }
        byPartition.values().forEach(list -> list.forEach(values::add));
      }
    }
    // The producer's epoch after its transactions: under transaction.version 2 every end
    // bumps it (KIP-890 part 2), before it the epoch stays at InitProducerId's.
    var described = get(admin().describeTransactions(List.of(req.path("transactional_id").asText()))
        .description(req.path("transactional_id").asText()));
    answer.put("producer_epoch", described.producerEpoch());
    answer.put("state", described.state().toString());
    if (req.has("group")) {
      ObjectNode committed = answer.putObject("group_offsets");
      Map<TopicPartition, OffsetAndMetadata> offsets = get(
          admin().listConsumerGroupOffsets(req.path("group").asText())
              .partitionsToOffsetAndMetadata());
      for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
        committed.put(name(e.getKey()), e.getValue().offset());
      }
    }
    return answer;
  }

  private static final class ArrayNodeBuilder {
    final com.fasterxml.jackson.databind.node.ArrayNode node = JSON.createArrayNode();

    void add(int partition, long offset) {
      node.addArray().add(partition).add(offset);
    }
  }

  // ------------------------------------------------------------------------ consumers

  private Properties consumerProps(JsonNode req) {
    Map<String, String> d = new HashMap<>();
    d.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    d.put(ConsumerConfig.CLIENT_ID_CONFIG, req.path("client_id").asText("clientcheck-consumer"));
    d.put(ConsumerConfig.GROUP_ID_CONFIG, req.path("group").asText());
    d.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    d.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    d.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    d.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    d.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
    d.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "25000");
    return props(req, d);
  }

  private static ObjectNode consumerState(KafkaConsumer<String, String> c) {
    ObjectNode o = JSON.createObjectNode();
    Set<TopicPartition> assignment = c.assignment();
    com.fasterxml.jackson.databind.node.ArrayNode a = o.putArray("assignment");
    new TreeMap<String, TopicPartition>() {{
      for (TopicPartition tp : assignment) put(name(tp), tp);
    }}.keySet().forEach(a::add);
    o.put("member_id", c.groupMetadata().memberId());
    o.put("generation", c.groupMetadata().generationId());
    return o;
  }

  /** Subscribes to "topics" in "group", polls until "count" records (or "timeout_ms"), commits
   *  what it read (unless "commit": false) and answers the records, the assignment and the
   *  offsets committed. "props" may set group.protocol=consumer (KIP-848). */
  private ObjectNode consume(JsonNode req) throws Exception {
    int count = req.path("count").asInt();
    long deadline = System.nanoTime() + req.path("timeout_ms").asLong(30000) * 1_000_000L;
    ObjectNode answer;
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(req))) {
      c.subscribe(strings(req.path("topics")));
      com.fasterxml.jackson.databind.node.ArrayNode records = JSON.createArrayNode();
      int n = 0;
      while (n < count && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
          ObjectNode o = records.addObject();
          o.put("topic", r.topic());
          o.put("p", r.partition());
          o.put("o", r.offset());
          o.put("k", r.key());
          o.put("v", r.value());
          n++;
        }
      }
      if (req.path("commit").asBoolean(true)) c.commitSync(Duration.ofSeconds(TIMEOUT_S));
      answer = consumerState(c);
      answer.set("records", records);
      ObjectNode committed = answer.putObject("committed");
      for (Map.Entry<TopicPartition, OffsetAndMetadata> e
          : c.committed(c.assignment(), Duration.ofSeconds(TIMEOUT_S)).entrySet()) {
        if (e.getValue() != null) committed.put(name(e.getKey()), e.getValue().offset());
      }
      c.close(org.apache.kafka.clients.consumer.CloseOptions.timeout(Duration.ofSeconds(10)));
    }
    return answer;
  }

  /** A consumer that stays in its group, polling on its own thread, until member_stop. */
  private static final class Member {
    final KafkaConsumer<String, String> consumer;
    final Thread thread;
    final AtomicBoolean stop = new AtomicBoolean();
    final AtomicInteger records = new AtomicInteger();
    volatile ObjectNode state = JSON.createObjectNode();
    volatile Throwable failure;

    Member(Properties p, List<String> topics) {
      consumer = new KafkaConsumer<>(p);
      thread = new Thread(() -> {
        try {
          consumer.subscribe(topics);
          while (!stop.get()) {
            records.addAndGet(consumer.poll(Duration.ofMillis(200)).count());
            state = consumerState(consumer);
          }
        } catch (Throwable t) {
          failure = t;
        } finally {
          consumer.close(
              org.apache.kafka.clients.consumer.CloseOptions.timeout(Duration.ofSeconds(10)));
        }
      }, "member");
      thread.setDaemon(true);
      thread.start();
    }

    void stop() {
      stop.set(true);
      try {
        thread.join(20000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Starts a member "name" and waits (up to "timeout_ms") until it has an assignment. */
  private ObjectNode memberStart(JsonNode req) throws Exception {
    String name = req.path("name").asText();
    if (members.containsKey(name)) throw new IllegalArgumentException("member " + name + " exists");
    Member m = new Member(consumerProps(req), strings(req.path("topics")));
    members.put(name, m);
    long deadline = System.nanoTime() + req.path("timeout_ms").asLong(30000) * 1_000_000L;
    while (System.nanoTime() < deadline && m.failure == null
        && m.state.path("assignment").isEmpty()) {
      Thread.sleep(100);
    }
    if (m.failure != null) throw new ExecutionException(m.failure);
    return m.state.deepCopy();
  }

  private ObjectNode memberStop(JsonNode req) throws Exception {
    Member m = members.remove(req.path("name").asText());
    if (m == null) throw new IllegalArgumentException("no member " + req.path("name").asText());
    m.stop();
    if (m.failure != null) throw new ExecutionException(m.failure);
    ObjectNode answer = m.state.deepCopy();
    answer.put("records", m.records.get());
    return answer;
  }

  // ------------------------------------------------------------------------ admin: topics

  /** {"topics": [{"name", "partitions", "replication_factor", "configs": {...}}]} */
  private ObjectNode createTopics(JsonNode req) throws Exception {
    List<NewTopic> topics = new ArrayList<>();
    for (JsonNode t : req.path("topics")) {
      NewTopic nt = new NewTopic(t.path("name").asText(),
          t.has("partitions") ? Optional.of(t.path("partitions").asInt()) : Optional.empty(),
          t.has("replication_factor")
              ? Optional.of((short) t.path("replication_factor").asInt()) : Optional.empty());
      Map<String, String> configs = new HashMap<>();
      t.path("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
      topics.add(nt.configs(configs));
    }
    var result = admin().createTopics(topics);
    ObjectNode answer = JSON.createObjectNode();
    answer.set("errors", outcomes(result.values()));
    ObjectNode created = answer.putObject("topics");
    for (NewTopic t : topics) {
      try {
        ObjectNode o = created.putObject(t.name());
        o.put("id", get(result.topicId(t.name())).toString());
        o.put("partitions", get(result.numPartitions(t.name())));
        o.put("replication_factor", get(result.replicationFactor(t.name())));
      } catch (Exception e) {
        created.remove(t.name());
      }
    }
    return answer;
  }

  private ObjectNode deleteTopics(JsonNode req) throws Exception {
    ObjectNode answer = JSON.createObjectNode();
    answer.set("errors", outcomes(admin().deleteTopics(strings(req.path("names"))).topicNameValues()));
    return answer;
  }

  private ObjectNode listTopics(JsonNode req) throws Exception {
    ObjectNode answer = JSON.createObjectNode();
    var names = answer.putArray("names");
    new java.util.TreeSet<>(get(admin().listTopics(
        new ListTopicsOptions().listInternal(req.path("internal").asBoolean(false))).names()))
        .forEach(names::add);
    return answer;
  }

  /**
   * {"names": [...], "partition_limit": N}: each topic's description in "topics" and its outcome
   * in "errors"; a partition's elr and last_known_elr are null when the client had them from
   * Metadata (a broker without DescribeTopicPartitions), lists when from DescribeTopicPartitions.
   * partition_limit (optional) is partitionSizeLimitPerResponse: the client pages with cursors.
   */
  private ObjectNode describeTopics(JsonNode req) throws Exception {
    DescribeTopicsOptions options = new DescribeTopicsOptions();
    if (req.has("partition_limit")) {
      options.partitionSizeLimitPerResponse(req.path("partition_limit").asInt());
    }
    Map<String, KafkaFuture<TopicDescription>> futures =
        admin().describeTopics(strings(req.path("names")), options).topicNameValues();
    ObjectNode answer = JSON.createObjectNode();
    answer.set("errors", outcomes(futures));
    ObjectNode topics = answer.putObject("topics");
    for (KafkaFuture<TopicDescription> future : new TreeMap<>(futures).values()) {
      if (future.isCompletedExceptionally()) continue;
      TopicDescription d = get(future);
      ObjectNode o = topics.putObject(d.name());
      o.put("id", d.topicId().toString());
      o.put("internal", d.isInternal());
      var parts = o.putArray("partitions");
      for (TopicPartitionInfo p : d.partitions()) {
        ObjectNode po = parts.addObject();
        po.put("partition", p.partition());
        po.put("leader", p.leader() == null ? -1 : p.leader().id());
        var replicas = po.putArray("replicas");
        p.replicas().forEach(n -> replicas.add(n.id()));
        var isr = po.putArray("isr");
        p.isr().forEach(n -> isr.add(n.id()));
        po.set("elr", nodeIds(p.elr()));
        po.set("last_known_elr", nodeIds(p.lastKnownElr()));
      }
    }
    return answer;
  }

  private static JsonNode nodeIds(List<Node> nodes) {
    if (nodes == null) return JSON.nullNode();
    var ids = JSON.createArrayNode();
    nodes.forEach(n -> ids.add(n.id()));
    return ids;
  }

  /** {"counts": {"topic": total}} */
  private ObjectNode createPartitions(JsonNode req) throws Exception {
    Map<String, NewPartitions> m = new LinkedHashMap<>();
    req.path("counts").fields().forEachRemaining(
        e -> m.put(e.getKey(), NewPartitions.increaseTo(e.getValue().asInt())));
    ObjectNode answer = JSON.createObjectNode();
    answer.set("errors", outcomes(admin().createPartitions(m).values()));
    return answer;
  }

  // ------------------------------------------------------------------------ admin: configs

  private static ConfigResource resource(JsonNode req) {
    ConfigResource.Type type = ConfigResource.Type.valueOf(req.path("type").asText("TOPIC"));
    return new ConfigResource(type, req.path("name").asText());
  }

  private ObjectNode describeConfigs(JsonNode req) throws Exception {
    ConfigResource r = resource(req);
    Config config = get(admin().describeConfigs(List.of(r)).all()).get(r);
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode entries = answer.putObject("configs");
    for (ConfigEntry e : config.entries()) {
      ObjectNode o = entries.putObject(e.name());
      o.put("value", e.value());
      o.put("source", e.source().name());
      o.put("default", e.isDefault());
      o.put("read_only", e.isReadOnly());
      o.put("sensitive", e.isSensitive());
    }
    return answer;
  }

  /** incrementalAlterConfigs: {"type", "name", "set": {k: v}, "delete": [k],
   *  "append": {k: v}, "subtract": {k: v}} */
  private ObjectNode alterConfigs(JsonNode req) throws Exception {
    ConfigResource r = resource(req);
    List<AlterConfigOp> ops = new ArrayList<>();
    req.path("set").fields().forEachRemaining(e -> ops.add(new AlterConfigOp(
        new ConfigEntry(e.getKey(), e.getValue().asText()), AlterConfigOp.OpType.SET)));
    for (String k : strings(req.path("delete"))) {
      ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
    }
    req.path("append").fields().forEachRemaining(e -> ops.add(new AlterConfigOp(
        new ConfigEntry(e.getKey(), e.getValue().asText()), AlterConfigOp.OpType.APPEND)));
    req.path("subtract").fields().forEachRemaining(e -> ops.add(new AlterConfigOp(
        new ConfigEntry(e.getKey(), e.getValue().asText()), AlterConfigOp.OpType.SUBTRACT)));
    get(admin().incrementalAlterConfigs(Map.of(r, ops)).all());
    return JSON.createObjectNode();
  }

  // ------------------------------------------------------------------------ admin: groups

  private ObjectNode listGroups(JsonNode req) throws Exception {
    Collection<GroupListing> groups = get(admin().listGroups(ListGroupsOptions.forConsumerGroups()).all());
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode o = answer.putObject("groups");
    for (GroupListing g : groups) {
      ObjectNode go = o.putObject(g.groupId());
      go.put("type", g.type().map(Enum::name).orElse(null));
      go.put("protocol", g.protocol());
      go.put("state", g.groupState().map(Enum::name).orElse(null));
      go.put("simple", g.isSimpleConsumerGroup());
    }
    return answer;
  }

  private ObjectNode describeGroups(JsonNode req) throws Exception {
    var result = admin().describeConsumerGroups(strings(req.path("groups")));
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode groups = answer.putObject("groups");
    for (Map.Entry<String, KafkaFuture<ConsumerGroupDescription>> e
        : result.describedGroups().entrySet()) {
      try {
        ConsumerGroupDescription d = get(e.getValue());
        ObjectNode o = groups.putObject(e.getKey());
        o.put("state", d.groupState().name());
        o.put("type", d.type().name());
        o.put("assignor", d.partitionAssignor());
        o.put("simple", d.isSimpleConsumerGroup());
        o.put("coordinator", d.coordinator() == null ? -1 : d.coordinator().id());
        d.groupEpoch().ifPresent(x -> o.put("group_epoch", x));
        var ms = o.putArray("members");
        for (MemberDescription m : d.members()) {
          ObjectNode mo = ms.addObject();
          mo.put("member_id", m.consumerId());
          mo.put("client_id", m.clientId());
          mo.put("host", m.host());
          m.groupInstanceId().ifPresent(x -> mo.put("instance_id", x));
          m.memberEpoch().ifPresent(x -> mo.put("member_epoch", x));
          var a = mo.putArray("assignment");
          m.assignment().topicPartitions().stream().map(ClientCheck::name).sorted().forEach(a::add);
        }
      } catch (Exception ex) {
        groups.set(e.getKey(), error(ex));
      }
    }
    return answer;
  }

  private ObjectNode deleteGroups(JsonNode req) throws Exception {
    ObjectNode answer = JSON.createObjectNode();
    answer.set("errors", outcomes(admin().deleteConsumerGroups(strings(req.path("groups"))).deletedGroups()));
    return answer;
  }

  private ObjectNode listGroupOffsets(JsonNode req) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> offsets =
        get(admin().listConsumerGroupOffsets(req.path("group").asText()).partitionsToOffsetAndMetadata());
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode o = answer.putObject("offsets");
    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
      if (e.getValue() == null) {
        o.putNull(name(e.getKey()));
        continue;
      }
      ObjectNode po = o.putObject(name(e.getKey()));
      po.put("offset", e.getValue().offset());
      po.put("metadata", e.getValue().metadata());
      e.getValue().leaderEpoch().ifPresent(x -> po.put("leader_epoch", x));
    }
    return answer;
  }

  /** {"group", "offsets": {"t:p": offset}} */
  private ObjectNode alterGroupOffsets(JsonNode req) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
    req.path("offsets").fields().forEachRemaining(
        e -> m.put(tp(e.getKey()), new OffsetAndMetadata(e.getValue().asLong())));
    var result = admin().alterConsumerGroupOffsets(req.path("group").asText(), m);
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode errors = answer.putObject("errors");
    for (TopicPartition tp : m.keySet()) {
      try {
        get(result.partitionResult(tp));
        errors.putNull(name(tp));
      } catch (Exception e) {
        errors.set(name(tp), error(e));
      }
    }
    return answer;
  }

  // ------------------------------------------------------------------------ admin: offsets

  /** {"before": {"t:p": offset}}: answers each partition's new low watermark. */
  private ObjectNode deleteRecords(JsonNode req) throws Exception {
    Map<TopicPartition, RecordsToDelete> m = new HashMap<>();
    req.path("before").fields().forEachRemaining(
        e -> m.put(tp(e.getKey()), RecordsToDelete.beforeOffset(e.getValue().asLong())));
    var result = admin().deleteRecords(m).lowWatermarks();
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode o = answer.putObject("low_watermarks");
    for (var e : result.entrySet()) o.put(name(e.getKey()), get(e.getValue()).lowWatermark());
    return answer;
  }

  /** {"partitions": ["t:p"], "spec": "earliest"|"latest"|"max_timestamp"|<timestamp>} */
  private ObjectNode listOffsets(JsonNode req) throws Exception {
    String s = req.path("spec").asText("latest");
    OffsetSpec spec = switch (s) {
      case "earliest" -> OffsetSpec.earliest();
      case "latest" -> OffsetSpec.latest();
      case "max_timestamp" -> OffsetSpec.maxTimestamp();
      case "earliest_local" -> OffsetSpec.earliestLocal();
      default -> OffsetSpec.forTimestamp(Long.parseLong(s));
    };
    Map<TopicPartition, OffsetSpec> m = new HashMap<>();
    for (String p : strings(req.path("partitions"))) m.put(tp(p), spec);
    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r = get(admin().listOffsets(m).all());
    ObjectNode answer = JSON.createObjectNode();
    ObjectNode o = answer.putObject("offsets");
    for (var e : r.entrySet()) {
      ObjectNode po = o.putObject(name(e.getKey()));
      po.put("offset", e.getValue().offset());
      po.put("timestamp", e.getValue().timestamp());
      e.getValue().leaderEpoch().ifPresent(x -> po.put("leader_epoch", x));
    }
    return answer;
  }

  // ------------------------------------------------------------------------ admin: cluster

  private ObjectNode describeCluster(JsonNode req) throws Exception {
    DescribeClusterResult r = admin().describeCluster();
    ObjectNode answer = JSON.createObjectNode();
    answer.put("cluster_id", get(r.clusterId()));
    answer.set("controller", node(get(r.controller())));
    var nodes = answer.putArray("nodes");
    for (Node n : get(r.nodes())) nodes.add(node(n));
    return answer;
  }

  private ObjectNode describeQuorum(JsonNode req) throws Exception {
    QuorumInfo q = get(admin().describeMetadataQuorum().quorumInfo());
    ObjectNode answer = JSON.createObjectNode();
    answer.put("leader_id", q.leaderId());
    answer.put("leader_epoch", q.leaderEpoch());
    answer.put("high_watermark", q.highWatermark());
    for (String kind : List.of("voters", "observers")) {
      var a = answer.putArray(kind);
      for (QuorumInfo.ReplicaState v : kind.equals("voters") ? q.voters() : q.observers()) {
        ObjectNode vo = a.addObject();
        vo.put("id", v.replicaId());
        vo.put("log_end_offset", v.logEndOffset());
      }
    }
    return answer;
  }
}
