//! The benchmark programs' bare consumer: a fresh Exclusive subscription from the start of
//! the topic, straight on pulsar-rs, with nothing of the connector in between.

use pulsar::consumer::{ConsumerOptions, InitialPosition};
use pulsar::message::proto::command_subscribe::SubType;
use pulsar::{Consumer, Pulsar, TokioExecutor};

/// Subscribes to `topic` as `<name>-<pid>` (Exclusive, earliest), with `receiver_queue`
/// messages prefetched (the flow permits the client hands the broker).
pub async fn subscribe(
    url: &str,
    topic: &str,
    name: &str,
    receiver_queue: u32,
) -> Result<Consumer<Vec<u8>, TokioExecutor>, Box<dyn std::error::Error>> {
    let pulsar = Pulsar::builder(url, TokioExecutor).build().await?;
    Ok(pulsar
        .consumer()
        .with_topic(topic)
        .with_subscription(format!("{name}-{}", std::process::id()))
        .with_subscription_type(SubType::Exclusive)
        .with_batch_size(receiver_queue)
        .with_options(ConsumerOptions {
            initial_position: InitialPosition::Earliest,
            ..Default::default()
        })
        .build()
        .await?)
}
