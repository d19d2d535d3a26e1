package conformance;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/**
 * Runs one conformance scenario (a JSON file, the first argument) with RocketMQ's official
 * 4.9.x client against a running name server and broker, and prints one JSON line per
 * delivery, then the dead letters of the group and its offsets. The Python side
 * (tests/conformance/sides.py) writes the scenario and reads the lines; the adapter side
 * records the same shape, and the comparator diffs the two.
 */
public final class Runner {
  private static final Object OUT = new Object();
  private static volatile long lastDelivery;
  private static final AtomicInteger CALLS = new AtomicInteger();
  private static long start;

  private Runner() {}

  static void emit(Map<String, Object> line) {
    synchronized (OUT) {
      System.out.println(JSON.toJSONString(line));
      System.out.flush();
    }
  }

  static Map<String, Object> describe(MessageExt m) {
    Map<String, Object> d = new LinkedHashMap<>();
    d.put("key", m.getKeys());
    d.put("rt", m.getReconsumeTimes());
    d.put("topic", m.getTopic());
    d.put("tags", m.getTags());
    d.put("keys", m.getKeys());
    d.put("queue", m.getQueueId());
    d.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
    d.put("props", new TreeMap<>(m.getProperties()));
    return d;
  }

  /** The scripted rule for a batch: the first rule matching its first message. */
  static JSONObject rule(JSONArray rules, MessageExt first) {
    for (int i = 0; i < rules.size(); i++) {
      JSONObject r = rules.getJSONObject(i);
      if (r.containsKey("key") && !r.getString("key").equals(first.getKeys())) {
        continue;
      }
      if (r.containsKey("rt") && r.getIntValue("rt") != first.getReconsumeTimes()) {
        continue;
      }
      if (r.containsKey("rtBelow") && first.getReconsumeTimes() >= r.getIntValue("rtBelow")) {
        continue;
      }
      return r;
    }
    JSONObject ok = new JSONObject();
    ok.put("action", "success");
    return ok;
  }

  static int record(List<MessageExt> msgs) {
    lastDelivery = System.currentTimeMillis();
    int call = CALLS.getAndIncrement();
    for (int i = 0; i < msgs.size(); i++) {
      Map<String, Object> d = describe(msgs.get(i));
      d.put("type", "delivery");
      d.put("call", call);
      d.put("index", i);
      d.put("size", msgs.size());
      d.put("t", lastDelivery - start);
      emit(d);
    }
    return call;
  }

  static Message message(String topic, JSONObject m) {
    String body = m.containsKey("body") ? m.getString("body") : m.getString("key");
    Message msg = new Message(topic, m.getString("tags"), m.getString("key"),
        body.getBytes(StandardCharsets.UTF_8));
    JSONObject props = m.getJSONObject("properties");
    if (props != null) {
      for (String k : props.keySet()) {
        // system names too (MAX_RECONSUME_TIMES): what a RocketMQ producer can set through
        // the client's accessor, the adapter's Message takes as a property
        MessageAccessor.putProperty(msg, k, props.getString(k));
      }
    }
    if (m.getIntValue("delayLevel") != 0) {
      msg.setDelayTimeLevel(m.getIntValue("delayLevel"));
    }
    return msg;
  }

  public static void main(String[] args) {
    try {
      run(args);
    } catch (Throwable e) {
      e.printStackTrace(System.out);
      System.out.flush();
      System.exit(2);
    }
  }

  static void run(String[] args) throws Exception {
    JSONObject s = JSON.parseObject(new String(Files.readAllBytes(Paths.get(args[0])),
        StandardCharsets.UTF_8));
    String namesrv = s.getString("namesrv");
    String topic = s.getString("topic");
    String group = s.getString("group");
    boolean orderly = "orderly".equals(s.getString("mode"));
    boolean broadcasting = "BROADCASTING".equals(s.getString("model"));
    JSONArray rules = s.getJSONArray("rules") == null ? new JSONArray() : s.getJSONArray("rules");
    long quietMs = s.containsKey("quietMs") ? s.getLongValue("quietMs") : 2500L;
    long maxMs = s.containsKey("maxMs") ? s.getLongValue("maxMs") : 90000L;

    DefaultMQProducer producer = new DefaultMQProducer("P_" + group);
    producer.setNamesrvAddr(namesrv);
    producer.setDefaultTopicQueueNums(1);
    producer.setInstanceName("p-" + group);
    producer.start();
    // the topic and the group's retry topic exist before the consumer starts: a route the
    // client learns later is polled every 30 s, which would stretch every scenario
    producer.createTopic("TBW102", topic, 1);
    if (!broadcasting) {
      producer.createTopic("TBW102", "%RETRY%" + group, 1);
    }
    Thread.sleep(300);
    JSONArray before = s.getJSONArray("preSend");
    if (before != null) {
      for (int i = 0; i < before.size(); i++) {
        producer.send(message(topic, before.getJSONObject(i)));
      }
    }
    JSONArray msgs = s.getJSONArray("messages");
    boolean after = s.getBooleanValue("sendAfterStart");
    if (!after) {
      for (int i = 0; i < msgs.size(); i++) {
        producer.send(message(topic, msgs.getJSONObject(i)));
      }
    }

    DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
    consumer.setNamesrvAddr(namesrv);
    consumer.setInstanceName("c-" + group);
    consumer.setMessageModel(broadcasting ? MessageModel.BROADCASTING : MessageModel.CLUSTERING);
    String from = s.containsKey("consumeFromWhere") ? s.getString("consumeFromWhere") : "FIRST";
    consumer.setConsumeFromWhere("LAST".equals(from) ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        : "TIMESTAMP".equals(from) ? ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
        : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
    if (s.containsKey("consumeTimestamp")) {
      consumer.setConsumeTimestamp(s.getString("consumeTimestamp"));
    }
    if (s.containsKey("maxReconsumeTimes")) {
      consumer.setMaxReconsumeTimes(s.getIntValue("maxReconsumeTimes"));
    }
    if (s.containsKey("batchMaxSize")) {
      consumer.setConsumeMessageBatchMaxSize(s.getIntValue("batchMaxSize"));
    }
    if (s.containsKey("suspendMillis")) {
      consumer.setSuspendCurrentQueueTimeMillis(s.getLongValue("suspendMillis"));
    }
    consumer.setConsumeThreadMin(1);
    consumer.setConsumeThreadMax(1);
    consumer.subscribe(topic, s.containsKey("expression") ? s.getString("expression") : "*");
    start = System.currentTimeMillis();
    lastDelivery = start;
    if (orderly) {
      consumer.registerMessageListener((MessageListenerOrderly) (list, ctx) -> {
        record(list);
        JSONObject r = rule(rules, list.get(0));
        String action = r.getString("action");
        if (r.containsKey("suspendMillis")) {
          ctx.setSuspendCurrentQueueTimeMillis(r.getLongValue("suspendMillis"));
        }
        switch (action) {
          case "throw":
            throw new IllegalStateException("scripted failure");
          case "null":
            return null;
          case "success":
            return ConsumeOrderlyStatus.SUCCESS;
          default:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
        }
      });
    } else {
      consumer.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
        record(list);
        JSONObject r = rule(rules, list.get(0));
        if (r.containsKey("ackIndex")) {
          ctx.setAckIndex(r.getIntValue("ackIndex"));
        }
        if (r.containsKey("delayLevel")) {
          ctx.setDelayLevelWhenNextConsume(r.getIntValue("delayLevel"));
        }
        switch (r.getString("action")) {
          case "throw":
            throw new IllegalStateException("scripted failure");
          case "null":
            return null;
          case "success":
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
          default:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        }
      });
    }
    consumer.start();
    Map<String, Object> started = new LinkedHashMap<>();
    started.put("type", "started");
    emit(started);
    if (after) {
      // wait until the consumer holds the topic's queue, then send
      long until = System.currentTimeMillis() + 30000;
      while (System.currentTimeMillis() < until && consumer.getDefaultMQPushConsumerImpl()
          .getRebalanceImpl().getProcessQueueTable().keySet().stream()
          .noneMatch(q -> q.getTopic().equals(topic))) {
        Thread.sleep(50);
      }
      Thread.sleep(s.containsKey("sendDelayMs") ? s.getLongValue("sendDelayMs") : 500L);
      for (int i = 0; i < msgs.size(); i++) {
        producer.send(message(topic, msgs.getJSONObject(i)));
      }
      lastDelivery = System.currentTimeMillis();
    }
    long deadline = start + maxMs;
    while (System.currentTimeMillis() < deadline
        && System.currentTimeMillis() - lastDelivery < quietMs) {
      Thread.sleep(100);
    }
    // the offsets the consumer would persist (read before shutdown: broadcasting keeps them
    // in a local file, clustering sends them to the broker on shutdown)
    OffsetStore store = consumer.getDefaultMQPushConsumerImpl().getOffsetStore();
    Set<MessageQueue> mqs = consumer.fetchSubscribeMessageQueues(topic);
    for (MessageQueue mq : mqs) {
      Map<String, Object> o = new LinkedHashMap<>();
      o.put("type", "offset");
      o.put("queue", mq.getQueueId());
      o.put("offset", store.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY));
      emit(o);
    }
    consumer.shutdown();

    DefaultMQPullConsumer reader = new DefaultMQPullConsumer("R_" + group);
    reader.setNamesrvAddr(namesrv);
    reader.setInstanceName("r-" + group);
    reader.start();
    List<MessageQueue> dlqs = new ArrayList<>();
    try {
      dlqs.addAll(reader.fetchSubscribeMessageQueues("%DLQ%" + group));
    } catch (Exception noDeadLetters) {
      // the broker creates %DLQ%<group> with the first dead letter
    }
    for (MessageQueue mq : dlqs) {
      long offset = 0;
      while (true) {
        PullResult pr = reader.pull(mq, "*", offset, 32);
        if (pr.getPullStatus() != PullStatus.FOUND) {
          break;
        }
        for (MessageExt m : pr.getMsgFoundList()) {
          Map<String, Object> d = describe(m);
          d.put("type", "dlq");
          emit(d);
        }
        offset = pr.getNextBeginOffset();
      }
    }
    reader.shutdown();
    producer.shutdown();
    Map<String, Object> done = new LinkedHashMap<>();
    done.put("type", "done");
    emit(done);
    System.exit(0);
  }
}
