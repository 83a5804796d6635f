//! The service as the server runs it: the proto's messages ([`super::pb`]),
//! except that the two event streams (ScheduleCalls, WatchBatch) send each
//! event in the encoded form its log keeps ([`crate::store::Entry::encoded`]).
//!
//! An event is encoded once, by whichever needs it first (the first stream
//! sending it, the log's compaction, a durable store writing it), and every
//! stream of the batch sends those bytes: a stream neither converts the
//! event to its proto message nor encodes it again, and a finished log is
//! compacted from the bytes already made. `build.rs` generates this server
//! from the same proto with [`EncodedEvent`] in place of
//! `ScheduleCallsResponse`; clients (and the benchmark's floor) use the
//! generated `pb` types, and the bytes on the wire are the same.

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};

/// The generated server: `ToolScheduler` and `ToolSchedulerServer`.
#[allow(clippy::all, missing_docs)]
pub mod server {
    include!(concat!(env!("OUT_DIR"), "/wire/toolsched.v1.rs"));
}

/// One `ScheduleCallsResponse` in its encoded form, as sent. Only ever
/// encoded (the server sends it; clients decode the proto's message).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EncodedEvent(pub Bytes);

impl prost::Message for EncodedEvent {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    /// Never called on the server (nothing decodes an event it sends):
    /// fields are skipped.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::api::pb;

    #[test]
    fn an_encoded_event_is_its_bytes_on_the_wire() {
        let message = pb::ScheduleCallsResponse {
            sequence: 7,
            time: None,
            event: Some(pb::schedule_calls_response::Event::BatchAccepted(
                pb::BatchAccepted {
                    batch_id: "b-1".into(),
                    ..Default::default()
                },
            )),
        };
        let bytes = Bytes::from(message.encode_to_vec());
        let encoded = EncodedEvent(bytes.clone());
        assert_eq!(encoded.encoded_len(), bytes.len());
        // Length-delimited as a stream frame carries it: read back as the
        // proto's message.
        let framed = encoded.encode_length_delimited_to_vec();
        assert_eq!(
            pb::ScheduleCallsResponse::decode_length_delimited(framed.as_slice()).unwrap(),
            message
        );
    }
}
