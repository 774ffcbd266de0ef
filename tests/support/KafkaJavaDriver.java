// Kafka's own Java clients and command-line tools, driven from a test through one JVM.
//
// A JVM costs 1-3 s of CPU to start and warm up; a test module that ran each tool as
// its own process (as kafka-topics.sh does) would pay that per call. This driver is
// started once per test module (tests/support/kafka_java.py) and reads one command per
// line on stdin, a JSON object {"op": ..., ...}; it answers each with one JSON line on
// stdout: {"ok": true, ...} or {"ok": false, "error": "<exception class>", "message": ...}
// (the cause of an ExecutionException, so the test sees what the client saw). Commands
// run one at a time, except group members started with "start_consumer", which poll in
// threads of their own until "stop_consumer".
//
// Tools run in this JVM through their main classes with System.in/out/err redirected
// and Kafka's Exit procedure replaced (they call Exit.exit when done): the answer
// carries their exit code, stdout and stderr. Everything the JVM would print otherwise
// (log4j) goes to stderr, so stdout carries only answers.
//
// Built by javac into the JVM cache (broker.testing.jvm.cache_dir), named by a hash of
// this file; the classpath is Apache Kafka's jars (scripts/install-kafka-jars.sh).

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.internals.Exit;

public final class KafkaJavaDriver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static PrintStream answers;
    private static Admin admin;
    private static String bootstrap;
    /** The code of a tool's first Exit.exit (some call it again from a finally). */
    private static Integer exitCode;

    /** What Exit.exit throws instead of ending the JVM: a tool's exit code. */
    private static final class ToolExit extends RuntimeException {
        private static final long serialVersionUID = 1L;

        ToolExit(int code, String message) {
            super("exit " + code + (message == null ? "" : ": " + message), null, false, false); // no stack trace
        }
    }

    public static void main(String[] args) throws Exception {
        answers = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err); // before any Kafka class: log4j's console goes to stderr
        bootstrap = args[0];
        Exit.Procedure exit = (code, message) -> {
            if (exitCode == null) {
                exitCode = code;
            }
            throw new ToolExit(code, message);
        };
        Exit.setExitProcedure(exit);
        Exit.setHaltProcedure(exit);
        Exit.setShutdownHookAdder((name, hook) -> { }); // the console tools' hooks would run at the end of the module
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        answer(JSON.createObjectNode().put("ok", true).put("ready", true));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode command = JSON.readTree(line);
            ObjectNode out = JSON.createObjectNode();
            long started = System.nanoTime();
            try {
                run(command, out);
                out.put("ok", true);
            } catch (Throwable e) {
                Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                out.put("ok", false);
                out.put("error", cause.getClass().getName());
                out.put("message", String.valueOf(cause.getMessage()));
            }
            out.put("ms", (System.nanoTime() - started) / 1_000_000);
            answer(out);
        }
        if (admin != null) {
            admin.close(Duration.ofSeconds(5));
        }
    }

    private static void answer(JsonNode node) throws Exception {
        answers.println(JSON.writeValueAsString(node));
        answers.flush();
    }

    private static Admin admin() {
        if (admin == null) {
            Properties props = new Properties();
            props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
            props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
            admin = Admin.create(props);
        }
        return admin;
    }

    private static void run(JsonNode c, ObjectNode out) throws Exception {
        String op = c.path("op").asText();
        switch (op) {
            case "produce" -> produce(c, out);
            case "consume_group" -> consumeGroup(c, out);
            case "transactional" -> transactional(c, out);
            case "start_consumer" -> startConsumer(c);
            case "stop_consumer" -> stopConsumer(c.path("name").asText(), out);
            case "consumer_status" -> consumerStatus(c.path("name").asText(), out);
            case "tool" -> tool(c, out);
            case "create_topics" -> {
                List<NewTopic> topics = new ArrayList<>();
                for (JsonNode t : c.path("topics")) {
                    topics.add(new NewTopic(t.path("name").asText(), t.path("partitions").asInt(), (short) 1));
                }
                admin().createTopics(topics).all().get();
            }
            case "delete_topics" -> admin().deleteTopics(strings(c.path("topics"))).all().get();
            case "list_topics" -> {
                ArrayNode names = out.putArray("topics");
                admin().listTopics().names().get().stream().sorted().forEach(names::add);
            }
            case "describe_topics" -> {
                ObjectNode topics = out.putObject("topics");
                Map<String, TopicDescription> all = admin().describeTopics(strings(c.path("topics"))).allTopicNames().get();
                for (TopicDescription d : all.values()) {
                    ArrayNode parts = topics.putArray(d.name());
                    for (TopicPartitionInfo p : d.partitions()) {
                        ObjectNode po = parts.addObject();
                        po.put("partition", p.partition());
                        po.put("leader", p.leader() == null ? -1 : p.leader().id());
                        ArrayNode replicas = po.putArray("replicas");
                        p.replicas().forEach(n -> replicas.add(n.id()));
                        ArrayNode isr = po.putArray("isr");
                        p.isr().forEach(n -> isr.add(n.id()));
                    }
                }
            }
            case "create_partitions" -> admin()
                    .createPartitions(Map.of(c.path("topic").asText(), NewPartitions.increaseTo(c.path("count").asInt())))
                    .all()
                    .get();
            case "describe_cluster" -> {
                DescribeClusterResult r = admin().describeCluster();
                out.put("cluster_id", r.clusterId().get());
                out.put("controller", r.controller().get() == null ? -1 : r.controller().get().id());
                ArrayNode nodes = out.putArray("nodes");
                for (Node n : r.nodes().get()) {
                    nodes.addObject().put("id", n.id()).put("host", n.host()).put("port", n.port());
                }
            }
            case "list_offsets" -> {
                OffsetSpec spec = switch (c.path("spec").asText()) {
                    case "earliest" -> OffsetSpec.earliest();
                    case "latest" -> OffsetSpec.latest();
                    default -> OffsetSpec.forTimestamp(c.path("timestamp").asLong());
                };
                Map<TopicPartition, OffsetSpec> request = new HashMap<>();
                for (TopicPartition tp : partitions(c)) {
                    request.put(tp, spec);
                }
                ObjectNode offsets = out.putObject("offsets");
                for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e :
                        admin().listOffsets(request).all().get().entrySet()) {
                    offsets.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
                }
            }
            case "list_groups" -> {
                ArrayNode groups = out.putArray("groups");
                for (GroupListing g : admin().listGroups(ListGroupsOptions.forConsumerGroups()).all().get()) {
                    groups.addObject().put("group", g.groupId()).put("state", String.valueOf(g.groupState().orElse(null)))
                            .put("type", String.valueOf(g.type().orElse(null)));
                }
            }
            case "describe_groups" -> {
                ObjectNode groups = out.putObject("groups");
                for (ConsumerGroupDescription d : admin().describeConsumerGroups(strings(c.path("groups"))).all().get().values()) {
                    ObjectNode g = groups.putObject(d.groupId());
                    g.put("state", String.valueOf(d.groupState()));
                    g.put("type", String.valueOf(d.type()));
                    g.put("coordinator", d.coordinator() == null ? -1 : d.coordinator().id());
                    ArrayNode members = g.putArray("members");
                    for (MemberDescription m : d.members()) {
                        ObjectNode mo = members.addObject().put("client_id", m.clientId()).put("host", m.host());
                        ArrayNode assigned = mo.putArray("partitions");
                        m.assignment().topicPartitions().forEach(tp -> assigned.add(tp.topic() + ":" + tp.partition()));
                    }
                }
            }
            case "group_offsets" -> {
                ObjectNode offsets = out.putObject("offsets");
                Map<TopicPartition, OffsetAndMetadata> all =
                        admin().listConsumerGroupOffsets(c.path("group").asText()).partitionsToOffsetAndMetadata().get();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : all.entrySet()) {
                    offsets.put(e.getKey().topic() + ":" + e.getKey().partition(), e.getValue() == null ? -1 : e.getValue().offset());
                }
            }
            case "alter_group_offsets" -> {
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                c.path("offsets").properties().forEach(e -> offsets.put(
                        new TopicPartition(c.path("topic").asText(), Integer.parseInt(e.getKey())),
                        new OffsetAndMetadata(e.getValue().asLong())));
                admin().alterConsumerGroupOffsets(c.path("group").asText(), offsets).all().get();
            }
            case "delete_group_offsets" -> admin()
                    .deleteConsumerGroupOffsets(c.path("group").asText(), new HashSet<>(partitions(c)))
                    .all()
                    .get();
            case "delete_groups" -> admin().deleteConsumerGroups(strings(c.path("groups"))).all().get();
            case "describe_configs" -> {
                ConfigResource resource = resource(c);
                Config config = admin().describeConfigs(List.of(resource)).all().get().get(resource);
                ObjectNode entries = out.putObject("configs");
                for (ConfigEntry e : config.entries()) {
                    entries.putObject(e.name()).put("value", e.value()).put("source", String.valueOf(e.source()));
                }
            }
            case "incremental_alter_configs" -> {
                ConfigResource resource = resource(c);
                List<AlterConfigOp> ops = new ArrayList<>();
                c.path("set").properties().forEach(e -> ops.add(
                        new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue().asText()), AlterConfigOp.OpType.SET)));
                admin().incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            }
            case "delete_records" -> {
                Map<TopicPartition, RecordsToDelete> request = new HashMap<>();
                c.path("before").properties().forEach(e -> request.put(
                        new TopicPartition(c.path("topic").asText(), Integer.parseInt(e.getKey())),
                        RecordsToDelete.beforeOffset(e.getValue().asLong())));
                ObjectNode lows = out.putObject("low_watermarks");
                for (var e : admin().deleteRecords(request).lowWatermarks().entrySet()) {
                    lows.put(String.valueOf(e.getKey().partition()), e.getValue().get().lowWatermark());
                }
            }
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
    }

    /** An idempotent KafkaProducer (acks=all): record i goes to partition i % partitions,
     * key "k<i>", value "v<i>"; answers each partition's offsets in send order. */
    private static void produce(JsonNode c, ObjectNode out) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000);
        String topic = c.path("topic").asText();
        int partitions = c.path("partitions").asInt();
        int start = c.path("start").asInt(0);
        int count = c.path("count").asInt();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = start; i < start + count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i)));
            }
            producer.flush();
            ObjectNode offsets = out.putObject("offsets");
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get();
                ArrayNode list = offsets.has(String.valueOf(m.partition()))
                        ? (ArrayNode) offsets.get(String.valueOf(m.partition()))
                        : offsets.putArray(String.valueOf(m.partition()));
                list.add(m.offset());
            }
        }
        out.put("sent", sent.size());
    }

    /** A KafkaConsumer in group "group" ("protocol": classic unless asked, earliest,
     * manual commits): subscribes, polls until "count" records or "timeout_ms", commits,
     * closes. */
    private static void consumeGroup(JsonNode c, ObjectNode out) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, c.path("group").asText());
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, c.path("protocol").asText("classic"));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, c.path("client_id").asText("java-driver"));
        int count = c.path("count").asInt();
        long deadline = System.currentTimeMillis() + c.path("timeout_ms").asLong(30000);
        ArrayNode records = out.putArray("records");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(c.path("topic").asText()));
            int got = 0;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    records.addArray().add(r.partition()).add(r.offset()).add(r.key()).add(r.value());
                    got++;
                }
            }
            consumer.commitSync(Duration.ofSeconds(15));
        }
    }

    /** A group member polling in a thread of its own until "stop_consumer" (to be seen
     * as a live member by describe commands meanwhile); its records are counted, and
     * kept ([partition, offset, value]) when "keep"; its assignment after each poll is
     * what "consumer_status" shows. */
    private static final class Member {
        final Thread thread;
        final AtomicBoolean running = new AtomicBoolean(true);
        final AtomicLong records = new AtomicLong();
        final List<Object[]> kept = new ArrayList<>();
        volatile List<Integer> assigned = List.of();
        volatile Throwable failure;

        Member(Properties props, String topic, boolean keep) {
            thread = new Thread(() -> {
                try (KafkaConsumer<String, String> consumer =
                        new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
                    consumer.subscribe(List.of(topic));
                    while (running.get()) {
                        ConsumerRecords<String, String> got = consumer.poll(Duration.ofMillis(100));
                        if (keep) {
                            synchronized (kept) {
                                for (ConsumerRecord<String, String> r : got) {
                                    kept.add(new Object[] {r.partition(), r.offset(), r.value()});
                                }
                            }
                        }
                        records.addAndGet(got.count());
                        assigned = consumer.assignment().stream().map(TopicPartition::partition).sorted().toList();
                        consumer.commitSync();
                    }
                } catch (Throwable e) {
                    failure = e;
                }
            });
            thread.setDaemon(true);
            thread.start();
        }
    }

    private static final Map<String, Member> MEMBERS = new HashMap<>();

    private static void startConsumer(JsonNode c) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, c.path("group").asText());
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, c.path("protocol").asText("classic"));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, c.path("name").asText());
        MEMBERS.put(c.path("name").asText(), new Member(props, c.path("topic").asText(), c.path("keep").asBoolean(false)));
    }

    /** Stops a member (it closes: leaves its group); "records" its count, "kept" its
     * records when it kept them. */
    private static void stopConsumer(String name, ObjectNode out) throws Exception {
        Member member = MEMBERS.remove(name);
        member.running.set(false);
        member.thread.join(30000);
        if (member.failure != null) {
            throw new ExecutionException(member.failure);
        }
        out.put("records", member.records.get());
        ArrayNode kept = out.putArray("kept");
        synchronized (member.kept) {
            for (Object[] r : member.kept) {
                kept.addArray().add((Integer) r[0]).add((Long) r[1]).add((String) r[2]);
            }
        }
    }

    /** A running member's record count and assigned partitions (after its last poll). */
    private static void consumerStatus(String name, ObjectNode out) throws Exception {
        Member member = MEMBERS.get(name);
        if (member.failure != null) {
            throw new ExecutionException(member.failure);
        }
        out.put("records", member.records.get());
        ArrayNode assigned = out.putArray("assigned");
        member.assigned.forEach(assigned::add);
    }

    /**
     * A transactional KafkaProducer: initTransactions(), then one transaction per entry of
     * "transactions" ({"records": n, "commit": bool}), each sending "v<t>-<i>" to "topic"
     * and committing or aborting.
     */
    private static void transactional(JsonNode c, ObjectNode out) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, c.path("transactional_id").asText());
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, c.path("max_block_ms").asInt(10000));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            int t = 0;
            for (JsonNode txn : c.path("transactions")) {
                producer.beginTransaction();
                for (int i = 0; i < txn.path("records").asInt(); i++) {
                    producer.send(new ProducerRecord<>(c.path("topic").asText(), "v" + t + "-" + i)).get();
                }
                if (txn.path("commit").asBoolean()) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                t++;
            }
        }
    }

    /** A tool's main class, in this JVM: its exit code (0 when it returned), stdout, stderr. */
    private static void tool(JsonNode c, ObjectNode out) throws Exception {
        List<String> args = new ArrayList<>();
        for (JsonNode a : c.path("args")) {
            args.add(a.asText().replace("{bootstrap}", bootstrap));
        }
        Method main = Class.forName(c.path("class").asText()).getMethod("main", String[].class);
        ByteArrayOutputStream stdout = new ByteArrayOutputStream();
        ByteArrayOutputStream stderr = new ByteArrayOutputStream();
        PrintStream oldOut = System.out;
        PrintStream oldErr = System.err;
        InputStream oldIn = System.in;
        exitCode = null;
        try {
            System.setOut(new PrintStream(stdout, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(stderr, true, StandardCharsets.UTF_8));
            System.setIn(new ByteArrayInputStream(c.path("stdin").asText("").getBytes(StandardCharsets.UTF_8)));
            main.invoke(null, (Object) args.toArray(new String[0]));
        } catch (java.lang.reflect.InvocationTargetException e) {
            if (!(e.getCause() instanceof ToolExit)) {
                exitCode = exitCode == null ? -1 : exitCode;
                e.getCause().printStackTrace(System.err);
            }
        } finally {
            System.out.flush();
            System.err.flush();
            System.setOut(oldOut);
            System.setErr(oldErr);
            System.setIn(oldIn);
        }
        out.put("exit", exitCode == null ? 0 : exitCode);
        out.put("stdout", stdout.toString(StandardCharsets.UTF_8));
        out.put("stderr", stderr.toString(StandardCharsets.UTF_8));
    }

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    private static List<TopicPartition> partitions(JsonNode c) {
        List<TopicPartition> out = new ArrayList<>();
        for (JsonNode p : c.path("partitions")) {
            out.add(new TopicPartition(c.path("topic").asText(), p.asInt()));
        }
        return out;
    }

    private static ConfigResource resource(JsonNode c) {
        ConfigResource.Type type = "broker".equals(c.path("type").asText()) ? ConfigResource.Type.BROKER : ConfigResource.Type.TOPIC;
        return new ConfigResource(type, c.path("name").asText());
    }

    private KafkaJavaDriver() {}
}
