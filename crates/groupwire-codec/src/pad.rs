//! Equal-length symbols from unequal payloads: a 2-byte big-endian length
//! in front, zeros behind.
//!
//! The block FEC layer pads each source payload to the longest in its
//! block, so the code sees equal-length symbols, and a rebuilt symbol says
//! how long its payload was. The prefix is part of the coded symbol.

use crate::CodecError;

/// Bytes of length prefix [`pad`] puts in front of a payload.
pub const LENGTH_PREFIX: usize = 2;

/// Writes `payload` into `symbol` as `len (u16, big-endian) || payload ||
/// zeros`. `symbol` must hold at least `payload.len() + 2` bytes and the
/// payload must be shorter than 64 KiB.
pub fn pad(payload: &[u8], symbol: &mut [u8]) -> Result<(), CodecError> {
    let bad = CodecError::BadPadding {
        len: payload.len(),
        symbol_len: symbol.len(),
    };
    let len = u16::try_from(payload.len()).map_err(|_| bad.clone())?;
    if payload.len() + LENGTH_PREFIX > symbol.len() {
        return Err(bad);
    }
    let (head, rest) = symbol.split_at_mut(LENGTH_PREFIX);
    head.copy_from_slice(&len.to_be_bytes());
    let (body, tail) = rest.split_at_mut(payload.len());
    body.copy_from_slice(payload);
    tail.fill(0);
    Ok(())
}

/// The payload of a symbol written by [`pad`]. Fails on a symbol shorter
/// than the prefix or a prefix longer than the symbol; the padding bytes
/// are not checked.
pub fn unpad(symbol: &[u8]) -> Result<&[u8], CodecError> {
    let Some((head, rest)) = symbol.split_first_chunk::<LENGTH_PREFIX>() else {
        return Err(CodecError::BadPadding {
            len: 0,
            symbol_len: symbol.len(),
        });
    };
    let len = usize::from(u16::from_be_bytes(*head));
    rest.get(..len).ok_or(CodecError::BadPadding {
        len,
        symbol_len: symbol.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_unpads() {
        let mut s = [0xAAu8; 8];
        pad(b"hey", &mut s).expect("fits");
        assert_eq!(s, [0, 3, b'h', b'e', b'y', 0, 0, 0]);
        assert_eq!(unpad(&s), Ok(&b"hey"[..]));
        pad(b"", &mut s[..2]).expect("fits");
        assert!(pad(b"toolong", &mut s).is_err());
        assert!(unpad(&[0]).is_err());
        assert!(unpad(&[0, 9, 1]).is_err());
    }
}
