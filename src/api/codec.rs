//! The service's gRPC codec: prost's, with a smaller encoding buffer.
//!
//! tonic gives every response stream an encoding buffer of 8 KiB, kept for
//! as long as the stream lives (each event is encoded into it and split off
//! to be sent; the buffer is reused once the sent bytes are dropped). A
//! batch's events are a few hundred bytes each, and a stream can stay open
//! for minutes at a prompt: 10,000 held prompts kept 80 MiB of buffers,
//! about a third of the server's memory per held stream (BENCHMARKS.md,
//! "Session 11"). The buffer starts at [`ENCODE_BUFFER`] and grows as
//! needed for a larger event, as tonic's does.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// The encoding buffer a response stream starts with: room for the events
/// of a batch up to its first prompt.
pub const ENCODE_BUFFER: usize = 1024;

/// tonic's default: encoded events are sent once this many bytes are ready
/// even while more are coming.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// [`tonic_prost::ProstCodec`] with an [`ENCODE_BUFFER`] encoding buffer
/// (decoding is prost's default). Named in `build.rs` as the generated
/// service's codec.
#[derive(Debug, Clone, Copy)]
pub struct EventCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for EventCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for EventCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(ENCODE_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::default())
    }
}
