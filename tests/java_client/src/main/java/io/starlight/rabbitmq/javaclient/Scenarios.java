package io.starlight.rabbitmq.javaclient;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Address;
import com.rabbitmq.client.BuiltinExchangeType;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.Method;
import com.rabbitmq.client.Recoverable;
import com.rabbitmq.client.RecoveryListener;
import com.rabbitmq.client.RpcClient;
import com.rabbitmq.client.RpcClientParams;
import com.rabbitmq.client.RpcServer;
import com.rabbitmq.client.ShutdownSignalException;
import com.rabbitmq.client.impl.recovery.AutorecoveringConnection;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

/**
 * What applications written against RabbitMQ's Java client do, run against the gateway.
 *
 * <p>{@code java ... Scenarios <scenario> <port> [arguments...]}. A scenario reports what it
 * observed as {@code FACT key=value} lines on stdout; the pytest side
 * (tests/integration/clients/test_java_client.py) holds the expectations, so that a failure shows
 * RabbitMQ's documented behaviour next to what happened. A scenario that needs the test to act
 * on the gateway (close its connections, restart it, release a held publish) prints {@code WAIT
 * <what>} and reads one line from stdin before it goes on. Anything unexpected ends the JVM with
 * a stack trace and exit status 1.
 */
public final class Scenarios {
  private static final long DEADLINE_MS = 20_000;
  private static final BufferedReader CONTROL =
      new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

  private final int port;
  private final String[] arguments;

  private Scenarios(int port, String[] arguments) {
    this.port = port;
    this.arguments = arguments;
  }

  public static void main(String[] args) throws Exception {
    Scenarios scenarios = new Scenarios(Integer.parseInt(args[1]), Arrays.copyOfRange(args, 2, args.length));
    switch (args[0]) {
      case "connection_defaults" -> scenarios.connectionDefaults();
      case "confirms_wait" -> scenarios.confirmsWait();
      case "confirms_async" -> scenarios.confirmsAsync();
      case "mandatory_return" -> scenarios.mandatoryReturn();
      case "consumer_prefetch" -> scenarios.consumerPrefetch();
      case "basic_get" -> scenarios.basicGet();
      case "counts_in_channel_order" -> scenarios.countsInChannelOrder();
      case "global_qos" -> scenarios.globalQos();
      case "lifetimes" -> scenarios.lifetimes();
      case "heartbeats" -> scenarios.heartbeats();
      case "properties" -> scenarios.properties();
      case "exclusive_consumer_and_cancel" -> scenarios.exclusiveConsumerAndCancel();
      case "rpc" -> scenarios.rpc();
      case "reject_nack_requeue" -> scenarios.rejectNackRequeue();
      case "recover" -> scenarios.recover();
      case "exchange_types" -> scenarios.exchangeTypes();
      case "one_message_two_queues" -> scenarios.oneMessageTwoQueues();
      case "missing_entities" -> scenarios.missingEntities();
      case "errors" -> scenarios.errors();
      case "exclusive_queue" -> scenarios.exclusiveQueue();
      case "refused_arguments" -> scenarios.refusedArguments();
      case "recovery" -> scenarios.recovery();
      case "blocked" -> scenarios.blocked();
      case "settle_on_close" -> scenarios.settleOnClose();
      case "transactions" -> scenarios.transactions();
      case "exchange_bindings" -> scenarios.exchangeBindings();
      case "streams" -> scenarios.streams();
      case "priority_queue" -> scenarios.priorityQueue();
      default -> throw new IllegalArgumentException("no scenario " + args[0]);
    }
    System.out.flush();
    System.exit(0); // the client's non-daemon threads (recovery, consumers) must not keep us
  }

  // ------------------------------------------------------------------------- reporting

  private static void fact(String key, Object value) {
    String text = String.valueOf(value).replace("\\", "\\\\").replace("\n", "\\n");
    System.out.println("FACT " + key + "=" + text);
    System.out.flush();
  }

  /** Tell the test what we wait for, and wait until it answers. */
  private static void waitForTest(String what) throws IOException {
    System.out.println("WAIT " + what);
    System.out.flush();
    if (CONTROL.readLine() == null) {
      throw new IllegalStateException("the test hung up while we waited for " + what);
    }
  }

  /** Code, hard/soft and text of the close an operation ended in. */
  private static void closeFacts(String key, Exception error) {
    ShutdownSignalException signal = shutdownSignal(error);
    Method reason = signal.getReason();
    if (reason instanceof AMQP.Channel.Close close) {
      fact(key + ".code", close.getReplyCode());
      fact(key + ".text", close.getReplyText());
    } else if (reason instanceof AMQP.Connection.Close close) {
      fact(key + ".code", close.getReplyCode());
      fact(key + ".text", close.getReplyText());
    } else {
      fact(key + ".code", "none: " + signal);
    }
    fact(key + ".hard", signal.isHardError());
  }

  private static ShutdownSignalException shutdownSignal(Throwable error) {
    for (Throwable cause = error; cause != null; cause = cause.getCause()) {
      if (cause instanceof ShutdownSignalException signal) {
        return signal;
      }
    }
    throw new IllegalStateException("not closed by the server", error);
  }

  // ------------------------------------------------------------------------- helpers

  private ConnectionFactory factory() {
    ConnectionFactory factory = new ConnectionFactory();
    factory.setHost("127.0.0.1");
    factory.setPort(port);
    return factory;
  }

  private static String unique(String prefix) {
    return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  private static String text(byte[] body) {
    return new String(body, StandardCharsets.UTF_8);
  }

  /** Poll a condition until it holds; false once the deadline passed. */
  private static boolean waitUntil(BooleanSupplier condition) throws InterruptedException {
    long deadline = System.currentTimeMillis() + DEADLINE_MS;
    while (!condition.getAsBoolean()) {
      if (System.currentTimeMillis() > deadline) {
        return false;
      }
      Thread.sleep(10); // polling interval of a condition with a deadline
    }
    return true;
  }

  private static void mustWaitUntil(String what, BooleanSupplier condition)
      throws InterruptedException {
    if (!waitUntil(condition)) {
      throw new IllegalStateException("timed out waiting for " + what);
    }
  }

  /** Basic.Get until a message comes or the deadline passes (null then). */
  private static GetResponse getWithin(Channel channel, String queue, boolean autoAck)
      throws Exception {
    AtomicReference<GetResponse> got = new AtomicReference<>();
    AtomicReference<Exception> failed = new AtomicReference<>();
    waitUntil(
        () -> {
          try {
            got.set(channel.basicGet(queue, autoAck));
          } catch (IOException error) {
            failed.set(error);
            return true;
          }
          return got.get() != null;
        });
    if (failed.get() != null) {
      throw failed.get();
    }
    return got.get();
  }

  /** The bodies of ``expected`` messages got (auto-ack) from a queue, plus any beyond, sorted. */
  private static List<String> drain(Channel channel, String queue, int expected) throws Exception {
    List<String> bodies = new ArrayList<>();
    while (bodies.size() < expected) {
      GetResponse response = getWithin(channel, queue, true);
      if (response == null) {
        break;
      }
      bodies.add(text(response.getBody()));
    }
    for (GetResponse extra = channel.basicGet(queue, true);
        extra != null;
        extra = channel.basicGet(queue, true)) {
      bodies.add(text(extra.getBody()));
    }
    bodies.sort(null);
    return bodies;
  }

  /** How many times the connection recovered (automatic recovery), counted as it happens. */
  private static AtomicInteger recoveries(Connection connection) {
    AtomicInteger recoveries = new AtomicInteger();
    ((Recoverable) connection)
        .addRecoveryListener(
            new RecoveryListener() {
              @Override
              public void handleRecovery(Recoverable recoverable) {
                recoveries.incrementAndGet();
              }

              @Override
              public void handleRecoveryStarted(Recoverable recoverable) {}
            });
    return recoveries;
  }

  private static void publishConfirmed(Channel channel, String exchange, String key, String body)
      throws Exception {
    channel.basicPublish(exchange, key, null, bytes(body));
    channel.waitForConfirmsOrDie(DEADLINE_MS);
  }

  /** A consumer that records its deliveries and acknowledges nothing by itself. */
  private static class Recorder extends DefaultConsumer {
    final List<Envelope> envelopes = new CopyOnWriteArrayList<>();
    final List<String> bodies = new CopyOnWriteArrayList<>();
    final AtomicInteger cancelOks = new AtomicInteger();
    volatile String consumeOkTag;

    Recorder(Channel channel) {
      super(channel);
    }

    @Override
    public void handleConsumeOk(String consumerTag) {
      super.handleConsumeOk(consumerTag);
      consumeOkTag = consumerTag;
    }

    @Override
    public void handleCancelOk(String consumerTag) {
      cancelOks.incrementAndGet();
    }

    @Override
    public void handleDelivery(
        String consumerTag, Envelope envelope, AMQP.BasicProperties properties, byte[] body) {
      envelopes.add(envelope);
      bodies.add(text(body));
    }

    int count() {
      return envelopes.size();
    }
  }

  // ------------------------------------------------------------------------- scenarios

  /** ConnectionFactory as it comes: the negotiated tuning, server properties, big bodies. */
  private void connectionDefaults() throws Exception {
    try (Connection connection = factory().newConnection()) {
      fact("heartbeat", connection.getHeartbeat());
      fact("frame_max", connection.getFrameMax());
      fact("channel_max", connection.getChannelMax());
      Map<String, Object> server = connection.getServerProperties();
      fact("product", server.get("product"));
      fact("version", server.get("version"));
      @SuppressWarnings("unchecked")
      Map<String, Object> capabilities = (Map<String, Object>) server.get("capabilities");
      TreeSet<String> advertised = new TreeSet<>();
      capabilities.forEach((name, on) -> { if (Boolean.TRUE.equals(on)) advertised.add(name); });
      fact("capabilities", String.join(",", advertised));
      Channel highest = connection.createChannel(connection.getChannelMax());
      fact("highest_channel_open", highest != null && highest.isOpen());

      Channel channel = connection.createChannel();
      String queue = channel.queueDeclare().getQueue();
      fact("server_named", queue.startsWith("amq.gen-"));
      // More than one frame's worth each way: the client splits it by frame_max, the gateway
      // must join it, and split it again on delivery.
      byte[] body = new byte[connection.getFrameMax() + 1000];
      for (int i = 0; i < body.length; i++) {
        body[i] = (byte) (i % 251);
      }
      channel.confirmSelect();
      channel.basicPublish("", queue, null, body);
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      GetResponse got = getWithin(channel, queue, true);
      fact("large_body_equal", got != null && Arrays.equals(got.getBody(), body));
    }
  }

  /** Channel.waitForConfirmsOrDie after a run of publishes. */
  private void confirmsWait() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.confirms");
      channel.queueDeclare(queue, true, false, false, null);
      channel.confirmSelect();
      for (int i = 0; i < 100; i++) {
        channel.basicPublish("", queue, null, bytes("m" + i));
      }
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      fact("confirmed", true);
      fact("next_publish_seq_no", channel.getNextPublishSeqNo());
      fact("message_count", channel.queueDeclarePassive(queue).getMessageCount());
      channel.queueDelete(queue);
    }
  }

  /** An asynchronous ConfirmListener: every sequence number acked once, in order. */
  private void confirmsAsync() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.async");
      channel.queueDeclare(queue, false, false, true, null);
      channel.confirmSelect();
      ConcurrentSkipListMap<Long, String> outstanding = new ConcurrentSkipListMap<>();
      AtomicInteger acked = new AtomicInteger();
      AtomicInteger nacked = new AtomicInteger();
      AtomicInteger multiples = new AtomicInteger();
      List<Long> ackTags = new CopyOnWriteArrayList<>();
      channel.addConfirmListener(
          (tag, multiple) -> {
            ackTags.add(tag);
            if (multiple) {
              multiples.incrementAndGet();
              Map<Long, String> settled = outstanding.headMap(tag, true);
              acked.addAndGet(settled.size());
              settled.clear();
            } else if (outstanding.remove(tag) != null) {
              acked.incrementAndGet();
            }
          },
          (tag, multiple) -> nacked.incrementAndGet());
      int count = 500;
      for (int i = 0; i < count; i++) {
        outstanding.put(channel.getNextPublishSeqNo(), "m" + i);
        channel.basicPublish("", queue, null, bytes("m" + i));
      }
      mustWaitUntil("every confirm", () -> outstanding.isEmpty() || nacked.get() > 0);
      fact("acked", acked.get());
      fact("nacked", nacked.get());
      boolean increasing = true;
      for (int i = 1; i < ackTags.size(); i++) {
        increasing &= ackTags.get(i) > ackTags.get(i - 1);
      }
      fact("ack_tags_increasing", increasing);
      fact("last_ack_tag", ackTags.get(ackTags.size() - 1));
      fact("received", drain(channel, queue, count).size());
    }
  }

  /** Mandatory publishes with a ReturnListener: the return comes before the confirm. */
  private void mandatoryReturn() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.mandatory");
      String exchange = unique("jc.unbound");
      channel.queueDeclare(queue, false, false, true, null);
      channel.exchangeDeclare(exchange, BuiltinExchangeType.DIRECT, false, true, null);
      List<String> events = new CopyOnWriteArrayList<>();
      channel.addReturnListener(
          returned ->
              events.add(
                  "return:%d:%s:%s:%s:%s"
                      .formatted(
                          returned.getReplyCode(),
                          returned.getReplyText(),
                          returned.getExchange(),
                          returned.getRoutingKey(),
                          text(returned.getBody()))));
      channel.addConfirmListener(
          (tag, multiple) -> events.add("ack:" + tag), (tag, multiple) -> events.add("nack:" + tag));
      channel.confirmSelect();
      channel.basicPublish("", "jc.nowhere", true, null, bytes("lost"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      channel.basicPublish(exchange, "k", true, null, bytes("unbound"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      channel.basicPublish("", queue, true, null, bytes("routed"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      // Not mandatory: dropped without a return, still confirmed.
      channel.basicPublish("", "jc.nowhere", false, null, bytes("dropped"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      fact("events", String.join("|", events));
      fact("exchange", exchange);
      fact("routed", String.join(",", drain(channel, queue, 1)));
    }
  }

  /** DefaultConsumer, manual acks, Basic.Qos: never more unacknowledged than the prefetch. */
  private void consumerPrefetch() throws Exception {
    int prefetch = 5;
    int count = 20;
    try (Connection connection = factory().newConnection()) {
      Channel publisher = connection.createChannel();
      String queue = unique("jc.prefetch");
      publisher.queueDeclare(queue, false, false, false, null);
      publisher.confirmSelect();
      for (int i = 0; i < count; i++) {
        publisher.basicPublish("", queue, null, bytes("m" + i));
      }
      publisher.waitForConfirmsOrDie(DEADLINE_MS);

      Channel channel = connection.createChannel();
      channel.basicQos(prefetch);
      AtomicInteger acked = new AtomicInteger();
      AtomicInteger maxUnacked = new AtomicInteger();
      Recorder recorder =
          new Recorder(channel) {
            @Override
            public void handleDelivery(
                String tag, Envelope envelope, AMQP.BasicProperties properties, byte[] body) {
              super.handleDelivery(tag, envelope, properties, body);
              maxUnacked.accumulateAndGet(count() - acked.get(), Math::max);
            }
          };
      String tag = channel.basicConsume(queue, false, recorder);
      // handleConsumeOk runs on the consumer's dispatch thread, after basicConsume returned.
      mustWaitUntil("handleConsumeOk", () -> recorder.consumeOkTag != null);
      fact("consume_ok_tag_matches", tag.equals(recorder.consumeOkTag));
      mustWaitUntil("the first window", () -> recorder.count() == prefetch);
      // One at a time: each ack lets exactly one more in.
      for (int i = 0; i < count - prefetch; i++) {
        int before = recorder.count();
        acked.incrementAndGet();
        channel.basicAck(recorder.envelopes.get(i).getDeliveryTag(), false);
        mustWaitUntil("the delivery after ack " + i, () -> recorder.count() == before + 1);
      }
      acked.set(count);
      channel.basicAck(recorder.envelopes.get(count - 1).getDeliveryTag(), true);
      channel.basicCancel(tag);
      mustWaitUntil("Cancel-Ok", () -> recorder.cancelOks.get() == 1);
      fact("max_unacked", maxUnacked.get());
      fact("delivered", recorder.count());
      fact("distinct", new TreeSet<>(recorder.bodies).size());
      boolean sequential = true;
      boolean redelivered = false;
      for (int i = 0; i < recorder.count(); i++) {
        sequential &= recorder.envelopes.get(i).getDeliveryTag() == i + 1;
        redelivered |= recorder.envelopes.get(i).isRedeliver();
      }
      fact("tags_sequential", sequential);
      fact("any_redelivered", redelivered);
      fact("in_order", recorder.bodies.equals(bodiesNamed(count)));
      fact("left_in_queue", channel.queueDeclarePassive(queue).getMessageCount());
      channel.queueDelete(queue);
    }
  }

  private static List<String> bodiesNamed(int count) {
    List<String> names = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      names.add("m" + i);
    }
    return names;
  }

  /**
   * An exclusive consumer keeps others out (403), and a consumer whose queue is deleted is told
   * with Basic.Cancel (consumer_cancel_notify): DefaultConsumer.handleCancel.
   */
  private void exclusiveConsumerAndCancel() throws Exception {
    try (Connection owner = factory().newConnection();
        Connection other = factory().newConnection()) {
      String queue = unique("jc.consumers");
      fact("queue", queue);
      Channel mine = owner.createChannel();
      mine.queueDeclare(queue, false, false, false, null);
      List<String> cancelled = new CopyOnWriteArrayList<>();
      Recorder exclusive =
          new Recorder(mine) {
            @Override
            public void handleCancel(String consumerTag) {
              cancelled.add(consumerTag);
            }
          };
      String tag = mine.basicConsume(queue, false, "", false, true, null, exclusive);
      Channel theirs = other.createChannel();
      try {
        theirs.basicConsume(queue, true, new DefaultConsumer(theirs));
        fact("second_consumer", "accepted");
      } catch (IOException error) {
        closeFacts("second_consumer", error);
      }
      Channel deleter = other.createChannel();
      deleter.queueDelete(queue);
      mustWaitUntil("handleCancel", () -> !cancelled.isEmpty());
      fact("cancel_notified", cancelled.equals(List.of(tag)));
      fact("channel_open", mine.isOpen());
    }
  }

  /**
   * The classic RPC pattern with the client's RpcServer and RpcClient: requests on a named
   * queue, replies to the client's server-named reply queue (reply-to, correlation id).
   */
  private void rpc() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel serverChannel = connection.createChannel();
      String queue = unique("jc.rpc");
      serverChannel.queueDeclare(queue, false, false, true, null);
      RpcServer server =
          new RpcServer(serverChannel, queue) {
            @Override
            public byte[] handleCall(byte[] request, AMQP.BasicProperties replyProperties) {
              return bytes("pong:" + text(request));
            }
          };
      Thread serving =
          new Thread(
              () -> {
                try {
                  server.mainloop();
                } catch (Exception error) {
                  // ended by closing its channel
                }
              });
      serving.start();
      Channel clientChannel = connection.createChannel();
      // "direct": RpcClientParams' default reply-to, RabbitMQ's direct reply-to pseudo-queue.
      boolean direct = arguments.length > 0 && arguments[0].equals("direct");
      String replyTo = direct ? "amq.rabbitmq.reply-to" : clientChannel.queueDeclare().getQueue();
      RpcClient client =
          new RpcClient(
              new RpcClientParams()
                  .channel(clientChannel)
                  .exchange("")
                  .routingKey(queue)
                  .replyTo(replyTo)
                  .timeout((int) DEADLINE_MS));
      List<String> replies = new ArrayList<>();
      for (int i = 0; i < 3; i++) {
        replies.add(client.stringCall("ping" + i));
      }
      fact("replies", String.join(",", replies));
      client.close();
      // The main loop waits for a delivery or its channel's shutdown (its consumer ignores
      // Cancel-Ok, so RpcServer.close() would leave it waiting).
      server.terminateMainloop();
      serverChannel.close();
      serving.join(DEADLINE_MS);
      fact("server_stopped", !serving.isAlive());
    }
  }

  /**
   * Every BasicProperties field and every field-table type the Java client writes (byte[] as
   * 'x', BigDecimal 'D', Date 'T', List 'A', nested Map 'F', null 'V', and the numbers) come
   * back as sent, through Pulsar. A user-id other than the connection's user is refused.
   */
  private void properties() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.properties");
      channel.queueDeclare(queue, false, false, true, null);
      channel.confirmSelect();
      Map<String, Object> nested = new TreeMap<>(Map.of("k", "v", "n", 1));
      Map<String, Object> headers = new HashMap<>();
      headers.put("int", 7);
      headers.put("long", 7_000_000_000L);
      headers.put("short", (short) 3);
      headers.put("byte", (byte) -2);
      headers.put("float", 1.5f);
      headers.put("double", 2.25);
      headers.put("decimal", new java.math.BigDecimal("12.345"));
      headers.put("bool", true);
      headers.put("string", "été");
      headers.put("bytes", new byte[] {1, 2, 3});
      headers.put("date", new java.util.Date(1_700_000_000_000L));
      headers.put("list", List.of(1, "a", true));
      headers.put("table", nested);
      headers.put("void", null);
      AMQP.BasicProperties sent =
          new AMQP.BasicProperties.Builder()
              .contentType("application/json")
              .contentEncoding("utf-8")
              .headers(headers)
              .deliveryMode(2)
              .priority(5)
              .correlationId("c-1")
              .replyTo("r-1")
              .messageId("m-1")
              .timestamp(new java.util.Date(1_700_000_001_000L))
              .type("t-1")
              .userId("guest")
              .appId("a-1")
              .build();
      channel.basicPublish("", queue, sent, bytes("body"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      GetResponse got = getWithin(channel, queue, true);
      AMQP.BasicProperties back = got.getProps();
      fact("sent", describe(sent));
      fact("back", describe(back));

      Channel other = connection.createChannel();
      try {
        other.basicPublish(
            "", queue, new AMQP.BasicProperties.Builder().userId("mallory").build(), bytes("x"));
        other.queueDeclarePassive(queue); // a round trip, so that the refusal arrives
        fact("other_user_id", "accepted");
      } catch (IOException | ShutdownSignalException error) {
        closeFacts("other_user_id", error);
      }
      fact("stored_after_refusal", channel.basicGet(queue, true) != null);
    }
  }

  /** Properties and headers in a comparable text: each value with its Java type. */
  private static String describe(AMQP.BasicProperties properties) {
    Map<String, Object> fields = new TreeMap<>();
    fields.put("contentType", properties.getContentType());
    fields.put("contentEncoding", properties.getContentEncoding());
    fields.put("deliveryMode", properties.getDeliveryMode());
    fields.put("priority", properties.getPriority());
    fields.put("correlationId", properties.getCorrelationId());
    fields.put("replyTo", properties.getReplyTo());
    fields.put("messageId", properties.getMessageId());
    fields.put("timestamp", properties.getTimestamp().getTime());
    fields.put("type", properties.getType());
    fields.put("userId", properties.getUserId());
    fields.put("appId", properties.getAppId());
    fields.put("headers", describeValue(properties.getHeaders()));
    return fields.toString();
  }

  private static String describeValue(Object value) {
    if (value == null) {
      return "null";
    }
    if (value instanceof Map<?, ?> map) {
      TreeMap<String, String> described = new TreeMap<>();
      map.forEach((key, item) -> described.put(String.valueOf(key), describeValue(item)));
      return described.toString();
    }
    if (value instanceof List<?> list) {
      return list.stream().map(Scenarios::describeValue).toList().toString();
    }
    if (value instanceof byte[] raw) {
      return "bytes" + Arrays.toString(raw);
    }
    if (value instanceof com.rabbitmq.client.LongString text) {
      return "String:" + text;  // the client reads every 'S' as a LongString
    }
    if (value instanceof java.util.Date date) {
      return "Date:" + date.getTime();
    }
    return value.getClass().getSimpleName() + ":" + value;
  }

  /**
   * basicQos(3, true): the limit is shared by the channel's consumers (two queues here), and
   * each ack lets exactly one more in.
   */
  private void globalQos() throws Exception {
    int limit = 3;
    int perQueue = 5;
    try (Connection connection = factory().newConnection()) {
      Channel admin = connection.createChannel();
      admin.confirmSelect();
      List<String> queues = List.of(unique("jc.global"), unique("jc.global"));
      for (String queue : queues) {
        admin.queueDeclare(queue, false, false, true, null);
        for (int i = 0; i < perQueue; i++) {
          admin.basicPublish("", queue, null, bytes(queue + "/" + i));
        }
      }
      admin.waitForConfirmsOrDie(DEADLINE_MS);
      Channel channel = connection.createChannel();
      channel.basicQos(limit, true);
      AtomicInteger delivered = new AtomicInteger();
      AtomicInteger acked = new AtomicInteger();
      AtomicInteger maxUnacked = new AtomicInteger();
      List<Envelope> envelopes = new CopyOnWriteArrayList<>();
      for (String queue : queues) {
        channel.basicConsume(
            queue,
            false,
            new DefaultConsumer(channel) {
              @Override
              public void handleDelivery(
                  String tag, Envelope envelope, AMQP.BasicProperties properties, byte[] body) {
                envelopes.add(envelope);
                maxUnacked.accumulateAndGet(
                    delivered.incrementAndGet() - acked.get(), Math::max);
              }
            });
      }
      mustWaitUntil("the shared window", () -> delivered.get() == limit);
      for (int i = 0; i < 2 * perQueue - limit; i++) {
        int before = delivered.get();
        acked.incrementAndGet();
        channel.basicAck(envelopes.get(i).getDeliveryTag(), false);
        mustWaitUntil("the delivery after ack " + i, () -> delivered.get() == before + 1);
      }
      acked.set(2 * perQueue);
      channel.basicAck(envelopes.get(envelopes.size() - 1).getDeliveryTag(), true);
      fact("delivered", delivered.get());
      fact("max_unacked", maxUnacked.get());
    }
  }

  /**
   * What ends with what: an auto-delete queue goes with its last consumer, an exclusive queue
   * with its connection (RabbitMQ deletes both at once; polled here, with a deadline).
   */
  private void lifetimes() throws Exception {
    try (Connection watcher = factory().newConnection()) {
      String autoDelete = unique("jc.autodelete");
      String exclusive = unique("jc.exclusive");
      Connection owner = factory().newConnection();
      Channel channel = owner.createChannel();
      channel.queueDeclare(autoDelete, false, false, true, null);
      channel.queueDeclare(exclusive, false, true, false, null);
      String tag = channel.basicConsume(autoDelete, true, new DefaultConsumer(channel));
      fact("auto_delete_kept_while_consumed", exists(watcher, autoDelete));
      channel.basicCancel(tag);
      fact("auto_delete_gone_after_cancel", waitUntil(() -> !exists(watcher, autoDelete)));
      fact("exclusive_kept_while_connected", exists(owner, exclusive));
      owner.close();
      fact("exclusive_gone_after_close", waitUntil(() -> !exists(watcher, exclusive)));
    }
  }

  /** A passive declare on a channel of its own (a 404 closes the channel). */
  private static boolean exists(Connection connection, String queue) {
    try {
      Channel channel = connection.createChannel();
      channel.queueDeclarePassive(queue);
      channel.close();
      return true;
    } catch (IOException | java.util.concurrent.TimeoutException error) {
      ShutdownSignalException signal = shutdownSignal(error);
      if (signal.getReason() instanceof AMQP.Channel.Close close && close.getReplyCode() == 404) {
        return false;
      }
      throw signal;
    }
  }

  /** A 1-second heartbeat asked for by the client: an idle connection stays open. */
  private void heartbeats() throws Exception {
    ConnectionFactory factory = factory();
    factory.setRequestedHeartbeat(1);
    factory.setAutomaticRecoveryEnabled(false);
    try (Connection connection = factory.newConnection()) {
      fact("heartbeat", connection.getHeartbeat());
      // Idle for four intervals: the behaviour under test is the passing time itself. Without
      // the gateway's heartbeats the client gives up after two missed ones.
      Thread.sleep(4_000);
      fact("open_after_idle", connection.isOpen());
      Channel channel = connection.createChannel();
      fact("usable_after_idle", channel.queueDeclare().getQueue().startsWith("amq.gen-"));
    }
  }

  /**
   * A channel's methods take effect in order: counts right after unconfirmed publishes
   * include them (passive declare, purge), and a purge removes them.
   */
  private void countsInChannelOrder() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.counts");
      channel.queueDeclare(queue, false, false, true, null);
      for (int i = 0; i < 3; i++) {
        channel.basicPublish("", queue, null, bytes("m" + i));
      }
      fact("declare_count", channel.queueDeclarePassive(queue).getMessageCount());
      channel.basicPublish("", queue, null, bytes("m3"));
      fact("purged", channel.queuePurge(queue).getMessageCount());
      fact("after_purge", channel.basicGet(queue, true) == null ? "empty" : "not empty");
    }
  }

  /** Basic.Get with and without auto-ack, the remaining count, null on an empty queue. */
  private void basicGet() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.get");
      channel.queueDeclare(queue, false, false, false, null);
      channel.confirmSelect();
      for (String body : List.of("m1", "m2", "m3")) {
        channel.basicPublish("", queue, null, bytes(body));
      }
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      for (int i = 1; i <= 3; i++) {
        boolean autoAck = i != 1;
        GetResponse got = getWithin(channel, queue, autoAck);
        fact("get" + i + ".body", text(got.getBody()));
        fact("get" + i + ".message_count", got.getMessageCount());
        fact("get" + i + ".redelivered", got.getEnvelope().isRedeliver());
        if (!autoAck) {
          channel.basicAck(got.getEnvelope().getDeliveryTag(), false);
        }
      }
      fact("empty_get_is_null", channel.basicGet(queue, true) == null);
      channel.queueDelete(queue);
    }
  }

  /**
   * A stream queue as RabbitMQ's streams page shows it: basicQos, then basicConsume with
   * x-stream-offset ("first", a Long offset, a Date); each delivery carries its offset as a
   * Long header; acks remove nothing; auto-ack is refused with 540.
   */
  private void streams() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String stream = unique("jc.stream");
      channel.queueDeclare(stream, true, false, false, Map.of("x-queue-type", "stream"));
      channel.confirmSelect();
      for (int i = 1; i <= 5; i++) {
        channel.basicPublish("", stream, null, bytes("m" + i));
      }
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      List<String> first = readStream(connection, stream, "first", 5);
      fact("first", first);
      fact("offset_class", lastOffsetClass.get());
      long third = Long.parseLong(first.get(2).split("@")[1]);
      fact("resumed", readStream(connection, stream, third + 1, 2));
      java.util.Date hourAgo = new java.util.Date(System.currentTimeMillis() - 3_600_000L);
      fact("since_an_hour_ago", readStream(connection, stream, hourAgo, 5).size());
      fact("again_after_acks", readStream(connection, stream, "first", 5).equals(first));
    }
    Connection refused = factory().newConnection();
    Channel autoAck = refused.createChannel();
    autoAck.basicQos(10);
    String stream = unique("jc.stream");
    autoAck.queueDeclare(stream, true, false, false, Map.of("x-queue-type", "stream"));
    try {
      autoAck.basicConsume(stream, true, new DefaultConsumer(autoAck));
      fact("auto_ack.code", "accepted");
    } catch (IOException | ShutdownSignalException error) {
      closeFacts("auto_ack", error);
    }
    if (refused.isOpen()) {
      refused.close();
    }
  }

  private final AtomicReference<String> lastOffsetClass = new AtomicReference<>("");

  /** ``count`` deliveries from ``offset``, as "body@offset", each acknowledged. */
  private List<String> readStream(Connection connection, String stream, Object offset, int count)
      throws Exception {
    Channel channel = connection.createChannel();
    channel.basicQos(2);
    List<String> got = new CopyOnWriteArrayList<>();
    String tag =
        channel.basicConsume(
            stream,
            false,
            Map.of("x-stream-offset", offset),
            new DefaultConsumer(channel) {
              @Override
              public void handleDelivery(
                  String consumerTag,
                  Envelope envelope,
                  AMQP.BasicProperties properties,
                  byte[] body)
                  throws IOException {
                Object at = properties.getHeaders().get("x-stream-offset");
                lastOffsetClass.set(at.getClass().getSimpleName());
                got.add(text(body) + "@" + at);
                channel.basicAck(envelope.getDeliveryTag(), false);
              }
            });
    mustWaitUntil("stream deliveries", () -> got.size() >= count);
    channel.basicCancel(tag);
    channel.close();
    return new ArrayList<>(got.subList(0, count));
  }

  /**
   * A priority queue as Spring AMQP declares one (QueueBuilder.maxPriority: an Integer
   * argument): a backlog with priorities set through BasicProperties.Builder.priority (some
   * left null) comes back highest first with basicQos(1), basicGet takes the highest, a
   * redeclare with a Long of the same value is equivalent and one with another value is 406.
   */
  private void priorityQueue() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.priority");
      fact("queue", queue);
      Map<String, Object> arguments = new HashMap<>();
      arguments.put("x-max-priority", 10);
      channel.queueDeclare(queue, true, false, false, arguments);
      channel.confirmSelect();
      Integer[] priorities = {null, 1, 5, 10, 5, null, 3, 10, 1, 0, 7, 3};
      for (int i = 0; i < priorities.length; i++) {
        AMQP.BasicProperties properties =
            new AMQP.BasicProperties.Builder().priority(priorities[i]).build();
        channel.basicPublish("", queue, properties, bytes("m" + i));
      }
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      fact("top_by_get", text(getWithin(channel, queue, true).getBody()));
      channel.basicQos(1);
      Recorder recorder = new Recorder(channel);
      String tag = channel.basicConsume(queue, false, recorder);
      for (int i = 0; i < priorities.length - 1; i++) { // one at a time: each ack, the next
        int delivered = i + 1;
        mustWaitUntil("delivery " + delivered, () -> recorder.count() == delivered);
        channel.basicAck(recorder.envelopes.get(i).getDeliveryTag(), false);
      }
      channel.basicCancel(tag);
      fact("consumed", String.join(",", recorder.bodies));
      Map<String, Object> asLong = new HashMap<>();
      asLong.put("x-max-priority", 10L);
      channel.queueDeclare(queue, true, false, false, asLong);
      fact("long_redeclare", "equivalent");
      Map<String, Object> other = new HashMap<>();
      other.put("x-max-priority", 5);
      try {
        channel.queueDeclare(queue, true, false, false, other);
        fact("other_redeclare", "declared");
      } catch (IOException error) {
        closeFacts("other_redeclare", error);
      }
      connection.createChannel().queueDelete(queue);
    }
  }

  /**
   * txSelect / txCommit / txRollback: publishes and acks take effect at the commit; a rollback
   * drops the publishes and leaves acked deliveries unacknowledged; the 406s of RabbitMQ.
   */
  private void transactions() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel plain = connection.createChannel();
      String queue = unique("jc.tx");
      plain.queueDeclare(queue, false, false, false, null);
      Channel tx = connection.createChannel();
      tx.txSelect();
      tx.basicPublish("", queue, null, bytes("t1"));
      tx.basicPublish("", queue, null, bytes("t2"));
      fact("before_commit_count", plain.queueDeclarePassive(queue).getMessageCount());
      tx.txCommit();
      tx.basicPublish("", queue, null, bytes("rolled-back"));
      tx.txRollback();
      GetResponse first = getWithin(tx, queue, false);
      GetResponse second = getWithin(tx, queue, false);
      fact("committed", text(first.getBody()) + "," + text(second.getBody()));
      tx.basicAck(second.getEnvelope().getDeliveryTag(), true);
      tx.txRollback();
      fact("after_rollback_get_is_null", plain.basicGet(queue, true) == null);
      tx.basicAck(second.getEnvelope().getDeliveryTag(), true); // unacked again: no 406
      tx.txCommit();
      tx.close();
      fact("after_commit_get_is_null", plain.basicGet(queue, true) == null);
      try {
        connection.createChannel().txCommit();
      } catch (IOException error) {
        closeFacts("commit_without_select", error);
      }
      Channel confirming = connection.createChannel();
      confirming.confirmSelect();
      try {
        confirming.txSelect();
      } catch (IOException error) {
        closeFacts("select_on_confirm", error);
      }
      plain.queueDelete(queue);
    }
  }

  /** basicReject / basicNack with requeue: back with redelivered=true; without: gone. */
  private void rejectNackRequeue() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      String queue = unique("jc.requeue");
      channel.queueDeclare(queue, false, false, false, null);
      channel.confirmSelect();
      channel.basicPublish("", queue, null, bytes("a"));
      channel.basicPublish("", queue, null, bytes("b"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);

      GetResponse first = getWithin(channel, queue, false);
      fact("first", text(first.getBody()) + ":" + first.getEnvelope().isRedeliver());
      channel.basicReject(first.getEnvelope().getDeliveryTag(), true);
      Map<String, Boolean> afterReject = new TreeMap<>();
      long lastTag = 0;
      for (int i = 0; i < 2; i++) {
        GetResponse got = getWithin(channel, queue, false);
        afterReject.put(text(got.getBody()), got.getEnvelope().isRedeliver());
        lastTag = got.getEnvelope().getDeliveryTag();
      }
      fact("after_reject", afterReject);
      // Both held: nack them together, requeued.
      channel.basicNack(lastTag, true, true);
      Map<String, Boolean> afterNack = new TreeMap<>();
      List<Long> tags = new ArrayList<>();
      for (int i = 0; i < 2; i++) {
        GetResponse got = getWithin(channel, queue, false);
        afterNack.put(text(got.getBody()), got.getEnvelope().isRedeliver());
        tags.add(got.getEnvelope().getDeliveryTag());
      }
      fact("after_nack_multiple", afterNack);
      // Settled for good: one rejected without requeue (dropped), one nacked without requeue.
      channel.basicReject(tags.get(0), false);
      channel.basicNack(tags.get(1), false, false);
      fact("empty_after_drop", channel.basicGet(queue, true) == null);
      fact("message_count", channel.queueDeclarePassive(queue).getMessageCount());
      channel.queueDelete(queue);
    }
  }

  /** basicRecover(true) redelivers the unacknowledged; requeue=false is 540 as on RabbitMQ. */
  private void recover() throws Exception {
    ConnectionFactory factory = factory();
    factory.setAutomaticRecoveryEnabled(false);
    Connection connection = factory.newConnection();
    try {
      Channel channel = connection.createChannel();
      String queue = unique("jc.recover");
      channel.queueDeclare(queue, false, false, false, null);
      channel.confirmSelect();
      for (String body : List.of("m1", "m2", "m3")) {
        channel.basicPublish("", queue, null, bytes(body));
      }
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      Recorder recorder = new Recorder(channel);
      channel.basicConsume(queue, false, recorder);
      mustWaitUntil("three deliveries", () -> recorder.count() == 3);
      channel.basicRecover(true);
      mustWaitUntil("three redeliveries", () -> recorder.count() == 6);
      List<String> again = new ArrayList<>();
      for (int i = 3; i < 6; i++) {
        again.add(recorder.bodies.get(i) + ":" + recorder.envelopes.get(i).isRedeliver());
      }
      again.sort(null);
      fact("redelivered", String.join(",", again));
      channel.basicAck(recorder.envelopes.get(5).getDeliveryTag(), true);
      channel.queueDelete(queue);

      Channel other = connection.createChannel();
      try {
        other.basicRecover(false);
        fact("recover_without_requeue", "accepted");
      } catch (IOException | ShutdownSignalException error) {
        closeFacts("recover_without_requeue", error);
      }
      fact("connection_open", connection.isOpen());
    } finally {
      connection.abort(); // closed by the server already, if the scenario went as RabbitMQ's
    }
  }

  /** Direct, fanout, topic and headers exchanges route as RabbitMQ's. */
  private void exchangeTypes() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      channel.confirmSelect();
      String id = unique("jc");
      Map<String, String[]> queues = new HashMap<>();
      for (String type : List.of("direct", "fanout", "topic", "headers")) {
        String exchange = id + "." + type;
        channel.exchangeDeclare(exchange, type, false, false, null);
        String q1 = exchange + ".q1";
        String q2 = exchange + ".q2";
        channel.queueDeclare(q1, false, false, true, null);
        channel.queueDeclare(q2, false, false, true, null);
        queues.put(type, new String[] {q1, q2});
      }
      String direct = id + ".direct";
      channel.queueBind(queues.get("direct")[0], direct, "red");
      channel.queueBind(queues.get("direct")[1], direct, "green");
      channel.queueBind(queues.get("direct")[1], direct, "red");
      publishConfirmed(channel, direct, "red", "red");
      publishConfirmed(channel, direct, "green", "green");
      publishConfirmed(channel, direct, "blue", "blue");

      String fanout = id + ".fanout";
      channel.queueBind(queues.get("fanout")[0], fanout, "");
      channel.queueBind(queues.get("fanout")[1], fanout, "ignored");
      publishConfirmed(channel, fanout, "any-key", "f1");

      String topic = id + ".topic";
      channel.queueBind(queues.get("topic")[0], topic, "a.*");
      channel.queueBind(queues.get("topic")[1], topic, "#.z");
      for (String key : List.of("a.b", "a.b.z", "a.z", "x", "z", "a")) {
        publishConfirmed(channel, topic, key, key);
      }

      String headers = id + ".headers";
      channel.queueBind(
          queues.get("headers")[0], headers, "", Map.of("x-match", "all", "color", "red", "size", 5));
      channel.queueBind(
          queues.get("headers")[1], headers, "", Map.of("x-match", "any", "color", "red", "size", 5));
      publishHeaders(channel, headers, "both", Map.of("color", "red", "size", 5));
      publishHeaders(channel, headers, "color", Map.of("color", "red"));
      publishHeaders(channel, headers, "size", Map.of("size", 5, "extra", "x"));
      publishHeaders(channel, headers, "none", Map.of("color", "blue", "size", 6));
      publishHeaders(channel, headers, "no-headers", Map.of());

      // How many each queue should hold, only to know how long to wait for them; the test
      // checks which arrived.
      Map<String, int[]> expected =
          Map.of(
              "direct", new int[] {1, 2},
              "fanout", new int[] {1, 1},
              "topic", new int[] {2, 3},
              "headers", new int[] {1, 3});
      for (var entry : queues.entrySet()) {
        for (int i = 0; i < 2; i++) {
          List<String> got = drain(channel, entry.getValue()[i], expected.get(entry.getKey())[i]);
          fact(entry.getKey() + ".q" + (i + 1), String.join(",", got));
        }
      }
    }
  }

  /**
   * A message a fanout exchange routed to two queues is two messages: each queue's copy is
   * delivered first with redelivered=false, and settled (or requeued) on its own.
   */
  private void oneMessageTwoQueues() throws Exception {
    try (Connection connection = factory().newConnection()) {
      Channel channel = connection.createChannel();
      channel.confirmSelect();
      String exchange = unique("jc.shared");
      channel.exchangeDeclare(exchange, BuiltinExchangeType.FANOUT, false, true, null);
      String q1 = exchange + ".q1";
      String q2 = exchange + ".q2";
      for (String queue : List.of(q1, q2)) {
        channel.queueDeclare(queue, false, false, true, null);
        channel.queueBind(queue, exchange, "");
      }
      publishConfirmed(channel, exchange, "", "x");
      GetResponse first1 = getWithin(channel, q1, false);
      GetResponse first2 = getWithin(channel, q2, false);
      fact("first", first1.getEnvelope().isRedeliver() + "," + first2.getEnvelope().isRedeliver());
      // Settled in q1 (acknowledged), requeued in q2: q2's comes back redelivered.
      channel.basicAck(first1.getEnvelope().getDeliveryTag(), false);
      channel.basicReject(first2.getEnvelope().getDeliveryTag(), true);
      GetResponse again2 = getWithin(channel, q2, false);
      fact("q2_again", text(again2.getBody()) + ":" + again2.getEnvelope().isRedeliver());
      channel.basicAck(again2.getEnvelope().getDeliveryTag(), false);
      fact("q1_empty", channel.basicGet(q1, true) == null);
      fact("q2_empty", channel.basicGet(q2, true) == null);
    }
  }

  private static void publishHeaders(
      Channel channel, String exchange, String body, Map<String, Object> headers) throws Exception {
    AMQP.BasicProperties properties = new AMQP.BasicProperties.Builder().headers(headers).build();
    channel.basicPublish(exchange, "", properties, bytes(body));
    channel.waitForConfirmsOrDie(DEADLINE_MS);
  }

  /** Passive declares of what does not exist: 404, the channel closed, the connection not. */
  private void missingEntities() throws Exception {
    try (Connection connection = factory().newConnection()) {
      String queue = unique("jc.missing");
      fact("queue", queue);
      Channel channel = connection.createChannel();
      try {
        channel.queueDeclarePassive(queue);
        fact("queue_passive", "declared");
      } catch (IOException error) {
        closeFacts("queue_passive", error);
      }
      fact("channel_open", channel.isOpen());
      fact("connection_open", connection.isOpen());
      Channel again = connection.createChannel();
      try {
        again.exchangeDeclarePassive(queue);
        fact("exchange_passive", "declared");
      } catch (IOException error) {
        closeFacts("exchange_passive", error);
      }
      Channel third = connection.createChannel();
      try {
        third.basicConsume(queue, true, new DefaultConsumer(third));
        fact("consume", "consumed");
      } catch (IOException error) {
        closeFacts("consume", error);
      }
      fact("connection_still_open", connection.isOpen());
    }
  }

  /** The errors Java applications meet most, each on a fresh channel (or connection). */
  private void errors() throws Exception {
    String queue = unique("jc.errors");
    fact("queue", queue);
    Map<String, ThrowingAction> attempts = new TreeMap<>();
    attempts.put("publish_to_missing_exchange", channel -> {
      channel.basicPublish(queue, "k", null, bytes("x"));
      channel.queueDeclarePassive(queue); // a round trip, so that the close arrives
    });
    attempts.put("inequivalent_durable", channel -> channel.queueDeclare(queue, true, false, false, null));
    attempts.put("unknown_delivery_tag", channel -> {
      channel.basicAck(99, false);
      channel.queueDeclarePassive(queue);
    });
    attempts.put("delete_if_unused", channel -> {
      channel.basicConsume(queue, true, new DefaultConsumer(channel));
      connectionOf(channel).createChannel().queueDelete(queue, true, false);
    });
    attempts.put("delete_if_empty", channel -> {
      channel.confirmSelect();
      channel.basicPublish("", queue, null, bytes("x"));
      try {
        channel.waitForConfirmsOrDie(DEADLINE_MS);
      } catch (InterruptedException | java.util.concurrent.TimeoutException error) {
        throw new IOException(error);
      }
      channel.queueDelete(queue, false, true);
    });
    // Without waiting for the confirm: RabbitMQ handles a channel's methods in order.
    attempts.put("delete_if_empty_unconfirmed", channel -> {
      channel.basicPublish("", queue, null, bytes("x"));
      channel.queueDelete(queue, false, true);
    });
    attempts.put("reserved_exchange_name", channel -> channel.exchangeDeclare("amq.jc", "direct"));
    attempts.put("unknown_exchange_type", channel -> channel.exchangeDeclare(queue, "no-such-type"));
    attempts.put("immediate_publish", channel -> {
      channel.basicPublish("", queue, false, true, null, bytes("x"));
      channel.queueDeclarePassive(queue);
    });
    attempts.put("qos_prefetch_size", channel -> channel.basicQos(4096, 1, false));
    ConnectionFactory factory = factory();
    factory.setAutomaticRecoveryEnabled(false);
    for (var attempt : attempts.entrySet()) {
      Connection connection = factory.newConnection();
      try {
        Channel channel = connection.createChannel();
        channel.queueDeclare(queue, false, false, false, null);
        channel.queuePurge(queue);
        Channel trying = connection.createChannel();
        try {
          attempt.getValue().run(trying);
          fact(attempt.getKey(), "accepted");
        } catch (IOException | ShutdownSignalException error) {
          closeFacts(attempt.getKey(), error);
        }
        fact(attempt.getKey() + ".connection_open", connection.isOpen());
      } finally {
        connection.abort();
      }
    }
    try (Connection connection = factory.newConnection()) {
      connection.createChannel().queueDelete(queue);
    }
  }

  private static Connection connectionOf(Channel channel) {
    return channel.getConnection();
  }

  /** An exclusive queue is locked to the connection that declared it: 405 for any other. */
  private void exclusiveQueue() throws Exception {
    try (Connection owner = factory().newConnection();
        Connection other = factory().newConnection()) {
      String queue = unique("jc.exclusive");
      fact("queue", queue);
      Channel mine = owner.createChannel();
      mine.queueDeclare(queue, false, true, false, null);
      Map<String, ThrowingAction> attempts = new TreeMap<>();
      attempts.put("declare", channel -> channel.queueDeclare(queue, false, true, false, null));
      attempts.put("passive", channel -> channel.queueDeclarePassive(queue));
      attempts.put("consume", channel -> channel.basicConsume(queue, true, new DefaultConsumer(channel)));
      attempts.put("purge", channel -> channel.queuePurge(queue));
      attempts.put("delete", channel -> channel.queueDelete(queue));
      attempts.put("get", channel -> channel.basicGet(queue, true));
      for (var attempt : attempts.entrySet()) {
        Channel channel = other.createChannel();
        try {
          attempt.getValue().run(channel);
          fact(attempt.getKey(), "allowed");
        } catch (IOException error) {
          closeFacts(attempt.getKey(), error);
        }
      }
      fact("owner_still_uses_it", mine.queueDeclarePassive(queue).getQueue().equals(queue));
    }
  }

  @FunctionalInterface
  private interface ThrowingAction {
    void run(Channel channel) throws IOException;
  }

  /**
   * Arguments the gateway refuses. Each argument is {@code queue|consume:name=int|str|bool:value}
   * (given by the test, which knows which ones the gateway does not implement).
   */
  private void refusedArguments() throws Exception {
    try (Connection connection = factory().newConnection()) {
      for (String spec : arguments) {
        String[] target = spec.split(":", 2);
        String[] nameValue = target[1].split("=", 2);
        String[] typed = nameValue[1].split(":", 2);
        Object value =
            switch (typed[0]) {
              case "int" -> Integer.parseInt(typed[1]);
              case "bool" -> Boolean.parseBoolean(typed[1]);
              default -> typed[1];
            };
        Map<String, Object> args = Map.of(nameValue[0], value);
        String queue = unique("jc.args");
        Channel channel = connection.createChannel();
        String key = target[0] + "." + nameValue[0];
        fact(key + ".queue", queue);
        try {
          if (target[0].equals("queue")) {
            channel.queueDeclare(queue, false, false, true, args);
          } else {
            channel.queueDeclare(queue, false, false, true, null);
            channel.basicConsume(queue, false, args, new DefaultConsumer(channel));
          }
          fact(key + ".code", "accepted");
        } catch (IOException error) {
          closeFacts(key, error);
        }
      }
      fact("connection_open", connection.isOpen());
    }
  }

  /**
   * Automatic connection recovery with topology recovery: an exchange, a server-named exclusive
   * queue and a durable queue bound to it, a consumer on each. The test closes or drops the
   * connection (or restarts the gateway); the client reconnects, declares it all again, and
   * messages flow; the durable queue's unacknowledged message comes back redelivered.
   */
  private void recovery() throws Exception {
    ConnectionFactory factory = factory();
    factory.setNetworkRecoveryInterval(200);
    // More ports (arguments): the client's address list, tried in turn on every (re)connection.
    List<Address> addresses = new ArrayList<>(List.of(new Address("127.0.0.1", port)));
    for (String other : arguments) {
      addresses.add(new Address("127.0.0.1", Integer.parseInt(other)));
    }
    try (Connection connection = factory.newConnection(addresses)) {
      AtomicInteger recoveries = recoveries(connection);
      AtomicReference<String> shutdown = new AtomicReference<>();
      List<String> renamed = new CopyOnWriteArrayList<>();
      ((AutorecoveringConnection) connection)
          .addQueueRecoveryListener((before, after) -> renamed.add(before + ">" + after));
      connection.addShutdownListener(
          signal -> {
            Method reason = signal.getReason();
            shutdown.compareAndSet(
                null,
                reason instanceof AMQP.Connection.Close close
                    ? close.getReplyCode() + " " + close.getReplyText()
                    : "lost: " + signal.getMessage());
          });
      Channel channel = connection.createChannel();
      String exchange = unique("jc.recovery");
      channel.exchangeDeclare(exchange, BuiltinExchangeType.DIRECT, false, false, null);
      String serverNamed = channel.queueDeclare().getQueue();
      channel.queueBind(serverNamed, exchange, "k");
      String durable = exchange + ".durable";
      channel.queueDeclare(durable, true, false, false, null);
      channel.queueBind(durable, exchange, "k");
      Recorder transient_ = new Recorder(channel);
      Recorder held = new Recorder(channel);
      channel.basicConsume(serverNamed, true, transient_);
      channel.basicConsume(durable, false, held);
      Channel publisher = connection.createChannel();
      publisher.confirmSelect();
      publishConfirmed(publisher, exchange, "k", "before");
      mustWaitUntil("both consumers", () -> transient_.count() == 1 && held.count() == 1);

      fact("held_first", held.bodies.get(0) + ":" + held.envelopes.get(0).isRedeliver());
      waitForTest("break-connection");
      mustWaitUntil("recovery", () -> recoveries.get() == 1);
      fact("shutdown", shutdown.get());
      fact("recovered", recoveries.get());
      // Called for every queue declared again; a server-named one gets a new name.
      fact(
          "queue_renamed",
          renamed.stream().anyMatch(change -> change.startsWith(serverNamed + ">amq.gen-")));
      mustWaitUntil("the unacknowledged message again", () -> held.count() == 2);
      fact("held_again", held.bodies.get(1) + ":" + held.envelopes.get(1).isRedeliver());
      publishConfirmed(publisher, exchange, "k", "after");
      boolean both = waitUntil(() -> transient_.count() == 2 && held.count() == 3);
      fact("transient_bodies", String.join(",", transient_.bodies));
      fact("durable_bodies", String.join(",", held.bodies));
      fact("both_after", both);
      channel.basicAck(held.envelopes.get(held.count() - 1).getDeliveryTag(), true);
      channel.queueDelete(durable);
      channel.exchangeDelete(exchange);
    }
  }

  /**
   * exchangeBind / exchangeUnbind (RabbitMQ's e2e bindings): routing through a chain and a
   * cycle, a nowait bind, an idempotent unbind, a mandatory message that reaches only an
   * exchange, RabbitMQ's refusals, and topology recovery declaring the bindings again.
   */
  private void exchangeBindings() throws Exception {
    ConnectionFactory factory = factory();
    factory.setNetworkRecoveryInterval(200);
    try (Connection connection = factory.newConnection()) {
      AtomicInteger recoveries = recoveries(connection);
      Channel channel = connection.createChannel();
      channel.confirmSelect();
      String id = unique("jc.e2e");
      String source = id + ".source";
      String middle = id + ".middle";
      String sink = id + ".sink";
      String queue = id + ".q";
      channel.exchangeDeclare(source, BuiltinExchangeType.TOPIC);
      channel.exchangeDeclare(middle, BuiltinExchangeType.DIRECT);
      channel.exchangeDeclare(sink, BuiltinExchangeType.FANOUT);
      channel.queueDeclare(queue, false, false, false, null);
      channel.queueBind(queue, sink, "");
      channel.exchangeBind(middle, source, "orders.*");
      channel.exchangeBind(sink, middle, "orders.created");
      channel.exchangeBindNoWait(sink, source, "audit.#", null);
      channel.exchangeBind(source, sink, ""); // a cycle: sink -> source -> ... -> sink
      publishConfirmed(channel, source, "orders.created", "created");
      publishConfirmed(channel, source, "orders.deleted", "deleted"); // middle: no match
      publishConfirmed(channel, source, "audit.login", "audit");
      fact("through", String.join(",", drain(channel, queue, 2)));
      channel.exchangeUnbind(middle, source, "orders.*");
      channel.exchangeUnbind(middle, source, "orders.*"); // idempotent
      publishConfirmed(channel, source, "orders.created", "after-unbind");
      publishConfirmed(channel, source, "audit.logout", "audit-2");
      fact("after_unbind", String.join(",", drain(channel, queue, 1)));
      // Mandatory: reaching an exchange is not reaching a queue.
      AtomicReference<String> returned = new AtomicReference<>("none");
      channel.addReturnListener(r -> returned.set(r.getReplyCode() + " " + r.getExchange()));
      channel.basicPublish(source, "orders.created", true, null, bytes("to-middle"));
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      fact("returned", returned.get());
      // RabbitMQ's refusals, each closing its channel.
      String missing = id + ".missing";
      try {
        connection.createChannel().exchangeBind(sink, missing, "");
      } catch (IOException error) {
        closeFacts("missing_source", error);
      }
      try {
        connection.createChannel().exchangeBind("", source, "");
      } catch (IOException error) {
        closeFacts("default_destination", error);
      }
      // Topology recovery declares the exchanges, the queue, and the bindings again,
      // exchange bindings included (the client records them).
      waitForTest("break-connection");
      mustWaitUntil("recovery", () -> recoveries.get() == 1);
      Channel again = connection.createChannel();
      again.confirmSelect();
      publishConfirmed(again, source, "audit.recovered", "recovered");
      fact("after_recovery", String.join(",", drain(again, queue, 1)));
      again.exchangeUnbind(sink, source, "audit.#");
      again.queueDelete(queue);
      for (String exchange : List.of(source, middle, sink)) {
        again.exchangeDelete(exchange);
      }
    }
  }

  /** BlockedListener: Connection.Blocked while a publish is held, Unblocked when it goes on. */
  private void blocked() throws Exception {
    try (Connection connection = factory().newConnection()) {
      List<String> events = new CopyOnWriteArrayList<>();
      connection.addBlockedListener(
          reason -> events.add("blocked:" + reason), () -> events.add("unblocked"));
      Channel channel = connection.createChannel();
      String queue = arguments[0];
      channel.queueDeclare(queue, false, false, true, null);
      channel.confirmSelect();
      channel.basicPublish("", queue, null, bytes("held"));
      mustWaitUntil("Connection.Blocked", () -> !events.isEmpty());
      waitForTest("release");
      channel.waitForConfirmsOrDie(DEADLINE_MS);
      mustWaitUntil("Connection.Unblocked", () -> events.size() == 2);
      fact("events", String.join("|", events));
      GetResponse got = getWithin(channel, queue, true);
      fact("delivered", got == null ? "nothing" : text(got.getBody()));
    }
  }

  // --------------------------------------------------------------- settlement on close

  /**
   * Issue 12, "wrong today" 5, from the Java client: whatever preceded (prefetch, a no-ack
   * consumer beside, a Basic.Get held, a partial ack, a cancel), closing the channel, closing
   * the connection or losing it gives every unacknowledged delivery back to the queue at once,
   * with redelivered=true, and nothing settled comes back. One line per permutation:
   * {@code FACT perm.<name>=<what came back>|<what should have>}.
   */
  private void settleOnClose() throws Exception {
    int[] prefetches = {0, 1, 3};
    String[] endings = {"channel", "connection", "lost"};
    int index = 0;
    try (Connection checker = factory().newConnection()) {
      Channel admin = checker.createChannel();
      admin.confirmSelect();
      for (int prefetch : prefetches) {
        for (String ending : endings) {
          for (boolean cancel : new boolean[] {false, true}) {
            // The other three toggles rotate so that each meets every prefetch and ending.
            boolean partialAck = index % 2 == 0;
            boolean noAckBeside = (index / 2) % 2 == 0;
            boolean getHeld = (index / 3) % 2 == 1;
            String name =
                "prefetch%d-%s%s%s%s%s"
                    .formatted(
                        prefetch,
                        ending,
                        cancel ? "-cancel" : "",
                        partialAck ? "-ack1" : "",
                        noAckBeside ? "-noack" : "",
                        getHeld ? "-get" : "");
            fact("perm." + name, settleOnce(admin, prefetch, ending, cancel, partialAck, noAckBeside, getHeld));
            index++;
          }
        }
      }
    }
  }

  private String settleOnce(
      Channel admin,
      int prefetch,
      String ending,
      boolean cancel,
      boolean partialAck,
      boolean noAckBeside,
      boolean getHeld)
      throws Exception {
    int count = 5;
    String queue = unique("jc.settle");
    String beside = queue + ".noack";
    admin.queueDeclare(queue, false, false, false, null);
    admin.queueDeclare(beside, false, false, false, null);
    for (int i = 0; i < count; i++) {
      admin.basicPublish("", queue, null, bytes("m" + i));
      admin.basicPublish("", beside, null, bytes("n" + i));
    }
    admin.waitForConfirmsOrDie(DEADLINE_MS);

    ConnectionFactory factory = factory();
    factory.setAutomaticRecoveryEnabled(false);
    SocketKeeper sockets = new SocketKeeper();
    factory.setSocketFactory(sockets);
    Connection subject = factory.newConnection();
    Channel channel = subject.createChannel();
    TreeSet<String> delivered = new TreeSet<>();
    TreeSet<String> settled = new TreeSet<>();
    if (getHeld) {
      delivered.add(text(getWithin(channel, queue, false).getBody()));
    }
    channel.basicQos(prefetch);
    Recorder recorder = new Recorder(channel);
    String tag = channel.basicConsume(queue, false, recorder);
    int available = count - delivered.size();
    int window = prefetch == 0 ? available : Math.min(prefetch, available);
    mustWaitUntil("the first window", () -> recorder.count() == window);
    if (noAckBeside) {
      Recorder noAck = new Recorder(channel);
      channel.basicConsume(beside, true, noAck);
      mustWaitUntil("the no-ack consumer", () -> noAck.count() == count);
    }
    if (partialAck) {
      channel.basicAck(recorder.envelopes.get(0).getDeliveryTag(), false);
      settled.add(recorder.bodies.get(0));
      int next = Math.min(window + 1, available);
      mustWaitUntil("the delivery the ack let in", () -> recorder.count() == next);
    }
    if (cancel) {
      channel.basicCancel(tag);
      mustWaitUntil("Cancel-Ok", () -> recorder.cancelOks.get() == 1);
    }
    delivered.addAll(recorder.bodies);
    switch (ending) {
      case "channel" -> channel.close();
      case "connection" -> subject.close();
      default -> sockets.abort();
    }

    TreeSet<String> expected = new TreeSet<>();
    for (int i = 0; i < count; i++) {
      String body = "m" + i;
      if (!settled.contains(body)) {
        expected.add(body + (delivered.contains(body) ? ":redelivered" : ":first"));
      }
    }
    TreeSet<String> back = new TreeSet<>();
    List<String> duplicates = new ArrayList<>();
    for (int i = 0; i < expected.size(); i++) {
      GetResponse got = getWithin(admin, queue, true);
      if (got == null) {
        break;
      }
      String seen = text(got.getBody()) + (got.getEnvelope().isRedeliver() ? ":redelivered" : ":first");
      if (!back.add(seen)) {
        duplicates.add(seen);
      }
    }
    for (GetResponse extra = admin.basicGet(queue, true); extra != null; extra = admin.basicGet(queue, true)) {
      duplicates.add("extra " + text(extra.getBody()));
    }
    GetResponse besideLeft = admin.basicGet(beside, true);
    String besideState = noAckBeside ? (besideLeft == null ? "" : " beside:" + text(besideLeft.getBody())) : "";
    admin.queueDelete(queue);
    admin.queueDelete(beside);
    subject.abort(); // whatever is left of it (a channel ending leaves the connection open)
    return String.join(",", back) + String.join(",", duplicates) + besideState + "|" + String.join(",", expected);
  }

  /** Keeps the client's socket, so that a scenario can lose the connection (TCP reset). */
  private static final class SocketKeeper extends javax.net.SocketFactory {
    private final List<java.net.Socket> sockets = new CopyOnWriteArrayList<>();

    @Override
    public java.net.Socket createSocket() {
      java.net.Socket socket = new java.net.Socket();
      sockets.add(socket);
      return socket;
    }

    @Override
    public java.net.Socket createSocket(String host, int port) throws IOException {
      throw new UnsupportedOperationException();
    }

    @Override
    public java.net.Socket createSocket(String host, int port, java.net.InetAddress local, int localPort) {
      throw new UnsupportedOperationException();
    }

    @Override
    public java.net.Socket createSocket(java.net.InetAddress host, int port) {
      throw new UnsupportedOperationException();
    }

    @Override
    public java.net.Socket createSocket(
        java.net.InetAddress address, int port, java.net.InetAddress local, int localPort) {
      throw new UnsupportedOperationException();
    }

    /** Close with SO_LINGER 0: the peer sees a reset, no Connection.Close. */
    void abort() throws IOException {
      for (java.net.Socket socket : sockets) {
        socket.setSoLinger(true, 0);
        socket.close();
      }
    }
  }
}
