// Commits one message in a Pulsar transaction and reads it back (scripts/geo_smoke.sh runs it
// with `java -cp <broker classpath> GeoTxnSmoke.java URL TOPIC PAYLOAD`; exit 0 when read back).
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.*;
import org.apache.pulsar.client.api.transaction.Transaction;

public class GeoTxnSmoke {
  public static void main(String[] a) throws Exception {
    String url = a[0], topic = a[1], payload = a[2];
    try (PulsarClient c = PulsarClient.builder().serviceUrl(url).enableTransaction(true)
        .operationTimeout(10, TimeUnit.SECONDS).build()) {
      Consumer<byte[]> consumer = c.newConsumer().topic(topic).subscriptionName("geo-smoke-txn-" + payload)
          .subscriptionInitialPosition(SubscriptionInitialPosition.Latest).subscribe();
      Producer<byte[]> p = c.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS).create();
      Transaction txn = c.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
      MessageId id = p.newMessage(txn).value(payload.getBytes()).send();
      txn.commit().get();
      Message<byte[]> m = consumer.receive(20, TimeUnit.SECONDS);
      boolean ok = m != null && new String(m.getValue()).equals(payload);
      System.out.println("transaction on " + url + ": " + txn.getTxnID() + " committed 1 message (" + id + "), read back: " + (ok ? "yes" : "NO"));
      p.close(); consumer.close();
      System.exit(ok ? 0 : 1);
    }
  }
}
