/*
 * Peer contender: the official Java client (pulsar-client, the broker's version) doing what
 * the tuned pulsar-rs reader does - receive N messages from the start of a topic on a fresh
 * Exclusive subscription, decode nothing, acknowledge cumulatively every --ack-every messages
 * and the last one. Prints one JSON line:
 *   {"contender":"java-consumer","events":N,"seconds":S,"events_per_s":R}
 * with the window from the first message received to the last acknowledgement handed to the
 * client (which sends it, grouped, by the time close() returns; close is outside the window,
 * as it is for the pulsar-rs readers).
 *
 * Usage: java -cp <classes>:<client jars> JavaConsumer <pulsar-url> <topic> <count> <receiver-queue> <ack-every>
 * (bench/peers/java-consumer/build.sh prints that classpath.)
 */

import java.util.Locale;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public final class JavaConsumer {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: JavaConsumer <pulsar-url> <topic> <count> <receiver-queue> <ack-every>");
            System.exit(2);
        }
        String url = args[0];
        String topic = args[1];
        long count = Long.parseLong(args[2]);
        int queue = Integer.parseInt(args[3]);
        long ackEvery = Long.parseLong(args[4]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build();
             Consumer<byte[]> consumer = client.newConsumer()
                 .topic(topic)
                 .subscriptionName("java-consumer-" + ProcessHandle.current().pid())
                 .subscriptionType(SubscriptionType.Exclusive)
                 .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                 .receiverQueueSize(queue)
                 .subscribe()) {
            long received = 0;
            long started = 0;
            Message<byte[]> unacked = null;
            while (received < count) {
                Message<byte[]> message = consumer.receive();
                if (received == 0) {
                    started = System.nanoTime();
                }
                received++;
                if (received % ackEvery == 0) {
                    consumer.acknowledgeCumulativeAsync(message);
                    unacked = null;
                } else {
                    unacked = message;
                }
            }
            if (unacked != null) {
                consumer.acknowledgeCumulativeAsync(unacked).get();
            }
            double seconds = (System.nanoTime() - started) / 1e9;
            System.out.printf(Locale.ROOT,
                "{\"contender\":\"java-consumer\",\"events\":%d,\"seconds\":%.3f,\"events_per_s\":%.0f}%n",
                received, seconds, received / Math.max(seconds, 1e-9));
        }
    }
}
