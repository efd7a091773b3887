//! Where a call's time goes, measured where the work happens.
//!
//! Every gRPC service and client generated here uses [`TimedCodec`]: prost's
//! own encoder and decoder, plus two things, both free when nobody asks:
//! - **decoding**, on the calling side: inside [`decoding`], each message's
//!   decode time is added up for the task that awaits it (tonic decodes a
//!   message in the task that polls the call, so a call's decodes are
//!   exactly those made inside its future). Outside, nothing is timed.
//! - **a lookup's timing**, on the answering side: a
//!   `LookupOrdersResponse` that carries a [`pending`] timing gets it
//!   completed at the moment it is serialized (see [`encode_lookup`]), so that
//!   the serialization itself is part of its `encode` and its `total`.
//!
//! Durations are measured on [`clock_nanos`], this process's monotonic clock.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::order::v2::{LookupOrdersResponse, ServerTiming};

/// The field number of `LookupOrdersResponse.timing`.
const TIMING_FIELD: u32 = 5;

tokio::task_local! {
    static DECODING: Cell<Duration>;
}

/// Runs `f`, adding up the time [`TimedCodec`] spends decoding messages in
/// it: `(its output, the decode time)`.
pub async fn decoding<F: std::future::Future>(f: F) -> (F::Output, Duration) {
    DECODING
        .scope(Cell::new(Duration::ZERO), async move {
            let out = f.await;
            (out, DECODING.with(Cell::get))
        })
        .await
}

/// Runs `decode`, a decoder's work, adding its time to the [`decoding`]
/// around it; outside one, just runs it.
pub fn timed_decode<T>(decode: impl FnOnce() -> T) -> T {
    if DECODING.try_with(|_| ()).is_err() {
        return decode();
    }
    let t0 = Instant::now();
    let out = decode();
    let took = t0.elapsed();
    let _ = DECODING.try_with(|c| c.set(c.get() + took));
    out
}

/// Nanoseconds since this process first read the clock: monotonic.
pub fn clock_nanos() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The timing a lookup's answer carries until it is serialized: the store's
/// time and the conversion's so far, and in `total_nanos` the moment the
/// lookup began ([`clock_nanos`]). [`encode_lookup`] turns it into the
/// finished [`ServerTiming`].
pub fn pending(store: Duration, converted: Duration, began_at: u64) -> ServerTiming {
    ServerTiming {
        store_nanos: nanos(store),
        encode_nanos: nanos(converted),
        total_nanos: began_at,
    }
}

/// Serializes `msg` into `buf`. If it carries a [`pending`] timing, the
/// timing is completed and appended after the rest of the message (protobuf
/// fields may come in any order): `encode` gains the serialization's time,
/// `total` runs from the lookup's start to now.
pub fn encode_lookup(mut msg: LookupOrdersResponse, buf: &mut impl bytes::BufMut) {
    let Some(pending) = msg.timing.take() else {
        // Encoding into a buffer with room cannot fail; tonic's and the
        // raw-TCP frame's buffers grow as needed.
        let _ = msg.encode(buf);
        return;
    };
    let t0 = Instant::now();
    let _ = msg.encode(buf);
    let serialized = t0.elapsed();
    let timing = ServerTiming {
        store_nanos: pending.store_nanos,
        encode_nanos: pending.encode_nanos.saturating_add(nanos(serialized)),
        total_nanos: clock_nanos().saturating_sub(pending.total_nanos),
    };
    prost::encoding::message::encode(TIMING_FIELD, &timing, buf);
}

/// Whether `T` is `LookupOrdersResponse`, and it as one.
fn as_lookup<T: 'static>(item: T) -> Result<LookupOrdersResponse, T> {
    let mut slot = Some(item);
    let any: &mut dyn std::any::Any = &mut slot;
    match any.downcast_mut::<Option<LookupOrdersResponse>>() {
        Some(lookup) => Ok(lookup.take().unwrap_or_default()),
        None => Err(slot.unwrap_or_else(|| unreachable!("the slot was just filled"))),
    }
}

/// prost's codec, with decode timing and lookup timing (see the module).
#[derive(Debug, Clone)]
pub struct TimedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for TimedCodec<T, U> {
    fn default() -> Self {
        TimedCodec(PhantomData)
    }
}

impl<T, U> Codec for TimedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = TimedEncoder<T>;
    type Decoder = TimedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        TimedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        TimedDecoder(PhantomData)
    }
}

/// prost's encoding; a lookup's pending timing completed on the way.
#[derive(Debug)]
pub struct TimedEncoder<T>(PhantomData<T>);

impl<T: Message + 'static> Encoder for TimedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match as_lookup(item) {
            Ok(lookup) => encode_lookup(lookup, buf),
            Err(item) => item
                .encode(buf)
                .map_err(|e| Status::internal(format!("encoding failed: {e}")))?,
        }
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// prost's decoding, timed inside [`decoding`].
#[derive(Debug)]
pub struct TimedDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for TimedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        timed_decode(|| {
            U::decode(buf)
                .map(Some)
                .map_err(|e| Status::internal(e.to_string()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> LookupOrdersResponse {
        LookupOrdersResponse {
            request_id: 7,
            next_page_token: "next".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_lookup_without_timing_encodes_as_prost_does() {
        let mut buf = Vec::new();
        encode_lookup(answer(), &mut buf);
        assert_eq!(buf, answer().encode_to_vec());
    }

    #[test]
    fn a_pending_timing_is_completed_and_decodes_back() {
        let began = clock_nanos();
        std::thread::sleep(Duration::from_millis(2));
        let mut msg = answer();
        msg.timing = Some(pending(
            Duration::from_micros(300),
            Duration::from_micros(20),
            began,
        ));
        let mut buf = Vec::new();
        encode_lookup(msg, &mut buf);
        let back = LookupOrdersResponse::decode(buf.as_slice()).unwrap();
        let t = back.timing.unwrap();
        assert_eq!(t.store_nanos, 300_000);
        assert!(t.encode_nanos >= 20_000, "{t:?}");
        assert!(t.total_nanos >= 2_000_000, "{t:?}");
        assert!(t.total_nanos < 2_000_000_000, "{t:?}");
        assert_eq!(back.request_id, 7);
        assert_eq!(back.next_page_token, "next");
    }

    #[test]
    fn only_lookups_are_taken_as_lookups() {
        assert!(as_lookup(answer()).is_ok());
        let other = crate::order::v2::LookupError::default();
        assert!(as_lookup(other).is_err());
    }
}
