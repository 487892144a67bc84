//! A partition's unbroken run of buffered messages from the table's position, and the gap
//! that ends it.

use crate::delta::table::positions::{commit_key, continues};
use crate::delta::{message_key, MessageKey};
use crate::source::MessagePosition;

/// A gap taken as real: the partition, what the table held, the message after the gap.
pub type AcceptedGap = (String, MessageKey, MessageKey);

/// Walks a partition's buffered messages (in order) from `held`, the table's position:
/// returns the commit key of the last message of the unbroken run, and the gap that ends it
/// (what the run held, the message after the gap). At each gap `bridge(at, next)` says
/// whether to go on past it.
pub(super) fn walk(
    positions: &[&MessagePosition],
    held: Option<MessageKey>,
    mut bridge: impl FnMut(MessageKey, MessageKey) -> bool,
) -> (Option<MessageKey>, Option<(MessageKey, MessageKey)>) {
    let mut last = held;
    for position in positions {
        if last.is_some_and(|l| message_key(position) <= l) {
            continue;
        }
        match last {
            Some(l) if !continues(l, position) => {
                if !bridge(l, message_key(position)) {
                    return (last, Some((l, message_key(position))));
                }
                last = Some(commit_key(position));
            }
            _ => last = Some(commit_key(position)),
        }
    }
    (last, None)
}
