//! Kafka framing: a 4-byte big-endian size, then that many bytes.

use std::io;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes read per step while a large frame arrives, so a size prefix alone cannot make the
/// broker allocate the whole claimed size up front.
const READ_STEP_BYTES: usize = 64 * 1024;

#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    Closed,
    /// A size below zero or above `socket.request.max.bytes`.
    TooLarge(i64),
    Io(io::Error),
}

/// Reads one frame. `Err(Closed)` on a clean end of stream before a size prefix.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R, max_bytes: usize) -> Result<Bytes, FrameError> {
    let mut size = [0u8; 4];
    match reader.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > max_bytes {
        return Err(FrameError::TooLarge(i64::from(size)));
    }
    let size = size as usize;
    let mut buf = BytesMut::with_capacity(size.min(READ_STEP_BYTES));
    while buf.len() < size {
        let want = (size - buf.len()).min(READ_STEP_BYTES);
        buf.reserve(want);
        let n = (&mut *reader).take(want as u64).read_buf(&mut buf).await.map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok(buf.freeze())
}

/// Prefixes `body` with its size.
pub fn frame(body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 4);
    out.put_i32(i32::try_from(body.len()).expect("responses stay below 2 GiB"));
    out.put_slice(body);
    out.freeze()
}
