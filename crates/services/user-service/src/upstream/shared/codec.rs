//! The gRPC twins' codec ([`FrozenCodec`]): tonic's prost encoder, as the
//! stock client has it, and each answer decoded from one `Bytes` split off
//! tonic's receive buffer (no copy), where tonic's own prost codec decodes
//! from the buffer (`BytesMut`) and each of prost's reads pays
//! `BytesMut::advance`.

use std::marker::PhantomData;

use bytes::Buf as _;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};

/// tonic's prost encoder, as the stock client has it, and decoding from the
/// message split off tonic's buffer as one `Bytes`.
pub(crate) struct FrozenCodec<T, U>(PhantomData<fn(T) -> U>);

impl<T, U> Default for FrozenCodec<T, U> {
    fn default() -> Self {
        FrozenCodec(PhantomData)
    }
}

/// [`FrozenCodec`]'s decoder.
pub(crate) struct FrozenDecode<U>(PhantomData<fn() -> U>);

impl<U: prost::Message + Default> Decoder for FrozenDecode<U> {
    type Item = U;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, tonic::Status> {
        // `DecodeBuf` hands out its bytes by splitting them off, not copying.
        let message = buf.copy_to_bytes(buf.remaining());
        proto::timing::timed_decode(|| {
            U::decode(message)
                .map(Some)
                .map_err(|e| tonic::Status::internal(format!("decoding the answer: {e}")))
        })
    }
}

impl<T, U> Codec for FrozenCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = FrozenDecode<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        FrozenDecode(PhantomData)
    }
}
