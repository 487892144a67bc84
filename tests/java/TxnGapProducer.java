// Produces JSON events in Pulsar transactions, so that the topic's ledger holds transaction
// markers (and aborted messages) between the messages consumers see: the broker-made entry-id
// gaps of tests/integration/offline/broker_gaps.rs. Run on the broker's cached classpath:
//   java -cp <classpath> TxnGapProducer.java URL TOPIC COUNT RATE_PER_S PER_TXN ABORT_EVERY BASE_MS
// Event i is {"user_id": "u<i % 50>", "event_time": BASE_MS + i, "seq": i}; every
// ABORT_EVERY-th transaction (0: none) is aborted after writing copies that must never show.
// PER_TXN 0: no transactions, every event sent on its own.
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.*;
import org.apache.pulsar.client.api.transaction.Transaction;

public class TxnGapProducer {
  static byte[] event(long i, long base) {
    return ("{\"user_id\":\"u" + (i % 50) + "\",\"event_time\":" + (base + i) + ",\"seq\":" + i + "}")
        .getBytes(StandardCharsets.UTF_8);
  }

  public static void main(String[] a) throws Exception {
    String url = a[0], topic = a[1];
    long count = Long.parseLong(a[2]);
    double rate = Double.parseDouble(a[3]);
    int perTxn = Integer.parseInt(a[4]);
    int abortEvery = Integer.parseInt(a[5]);
    long base = Long.parseLong(a[6]);
    try (PulsarClient c = PulsarClient.builder().serviceUrl(url).enableTransaction(true)
        .operationTimeout(10, TimeUnit.SECONDS).build()) {
      Producer<byte[]> p = c.newProducer().topic(topic).enableBatching(false)
          .sendTimeout(0, TimeUnit.SECONDS).create();
      long started = System.nanoTime();
      long sent = 0, txns = 0, aborted = 0;
      while (sent < count && perTxn == 0) {
        p.newMessage().value(event(sent, base)).send();
        sent++;
        long wait = started + (long) (sent * 1e9 / rate) - System.nanoTime();
        if (wait > 0) {
          TimeUnit.NANOSECONDS.sleep(wait);
        }
      }
      while (sent < count) {
        txns++;
        if (abortEvery > 0 && txns % abortEvery == 0) {
          Transaction txn = c.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
          for (int k = 0; k < perTxn; k++) {
            p.newMessage(txn).value(event(sent + k, base - 1_000_000)).send();
          }
          txn.abort().get();
          aborted++;
          continue;
        }
        Transaction txn = c.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
        for (int k = 0; k < perTxn && sent < count; k++, sent++) {
          p.newMessage(txn).value(event(sent, base)).send();
        }
        txn.commit().get();
        long due = started + (long) (sent * 1e9 / rate);
        long wait = due - System.nanoTime();
        if (wait > 0) {
          TimeUnit.NANOSECONDS.sleep(wait);
        }
      }
      p.close();
      System.out.println(perTxn == 0 ? "produced " + sent + " events without transactions"
          : "produced " + sent + " events in " + (txns - aborted) + " committed and " + aborted
              + " aborted transactions");
    }
  }
}
