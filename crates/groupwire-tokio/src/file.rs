//! Files as bulk payloads ([`crate::rbudp`], [`crate::striped`]): a
//! [`FileSource`] that reads ahead and a [`FileSink`] that writes behind,
//! so a blast of 1400-byte packets costs one system call per megabyte, not
//! one per packet.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use groupwire_proto::rbudp::{BlastSink, BlastSource};

/// Bytes a [`FileSource`] reads per system call.
const READ_AHEAD: usize = 1 << 20;
/// Bytes a [`FileSink`] gathers before it writes.
const WRITE_BEHIND: usize = 1 << 20;

/// A file read at any offset, a megabyte ahead at a time (a blast reads
/// in order; a re-blast reads what is missing, often in runs).
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    buf_at: u64,
}

impl FileSource {
    /// Opens `path` for reading; its length now is the payload's.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Self {
            file,
            len,
            buf: Vec::new(),
            buf_at: 0,
        })
    }
}

impl FileSource {
    /// The open file (to check its metadata, say whether it changed).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl BlastSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&mut self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let end = offset + out.len() as u64;
        let held = self.buf_at..self.buf_at + self.buf.len() as u64;
        if offset >= held.start && end <= held.end {
            let at = (offset - self.buf_at) as usize;
            out.copy_from_slice(&self.buf[at..at + out.len()]);
            return Ok(());
        }
        if out.len() >= READ_AHEAD {
            return read_exact_at(&self.file, out, offset);
        }
        let n = (self.len.saturating_sub(offset)).min(READ_AHEAD as u64) as usize;
        if n < out.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file is shorter than when the transfer started",
            ));
        }
        self.buf.resize(n, 0);
        self.buf_at = offset;
        read_exact_at(&self.file, &mut self.buf, offset).inspect_err(|_| self.buf.clear())?;
        out.copy_from_slice(&self.buf[..out.len()]);
        Ok(())
    }
}

fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file is shorter than when the transfer started",
            )
        } else {
            e
        }
    })
}

/// A file written at any offset: consecutive writes are gathered into one
/// of up to a megabyte; reading back (the receiver's hash) serves bytes
/// still gathered from memory, and writes what is gathered before reading
/// anything else.
#[derive(Debug)]
pub struct FileSink {
    file: File,
    pending: Vec<u8>,
    /// The file offset of `pending[0]`.
    pending_at: u64,
}

impl FileSink {
    /// Creates `path` (truncating a file that is there), for writing and
    /// reading back.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Self::from_file(file))
    }

    /// Writes into an open file (opened for reading and writing).
    pub fn from_file(file: File) -> Self {
        Self {
            file,
            pending: Vec::with_capacity(WRITE_BEHIND),
            pending_at: 0,
        }
    }

    /// Writes what is gathered.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.file.write_all_at(&self.pending, self.pending_at)?;
            self.pending.clear();
        }
        Ok(())
    }

    /// Writes what is gathered and asks the OS to put the file on disk.
    pub fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }
}

impl BlastSink for FileSink {
    fn prepare(&mut self, size: u64) -> io::Result<()> {
        self.pending.clear();
        self.file.set_len(size)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let follows = offset == self.pending_at + self.pending.len() as u64;
        if !follows || self.pending.len() + data.len() > WRITE_BEHIND {
            self.flush()?;
            self.pending_at = offset;
        }
        if data.len() >= WRITE_BEHIND {
            return self.file.write_all_at(data, offset);
        }
        self.pending.extend_from_slice(data);
        Ok(())
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        // The receiver hashes a segment as soon as it is complete, usually
        // from bytes still gathered here: serve those without breaking up
        // the gathered write.
        let from = offset.checked_sub(self.pending_at).map(|d| d as usize);
        if let Some(held) = from.and_then(|d| self.pending.get(d..d.checked_add(buf.len())?)) {
            buf.copy_from_slice(held);
            return Ok(());
        }
        self.flush()?;
        read_exact_at(&self.file, buf, offset)
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        // What was stored is kept; an error here has nobody to go to.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_gathers_runs_and_a_source_reads_them_back_in_any_order() {
        let dir = std::env::temp_dir().join(format!("gw-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("payload");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut sink = FileSink::create(&path).unwrap();
        sink.prepare(data.len() as u64).unwrap();
        // Packets out of order, runs, and one write larger than the buffer.
        let p = 1400;
        let order: Vec<usize> = (0..data.len().div_ceil(p))
            .rev()
            .step_by(2)
            .chain(
                (0..data.len().div_ceil(p)).filter(|i| (data.len().div_ceil(p) - 1 - i) % 2 == 1),
            )
            .collect();
        for i in order {
            let s = i * p;
            let e = (s + p).min(data.len());
            sink.write_at(s as u64, &data[s..e]).unwrap();
        }
        let mut back = vec![0u8; 10_000];
        sink.read_at(1_000_000, &mut back).unwrap();
        assert_eq!(back, data[1_000_000..1_010_000]);
        sink.write_at(0, &data[..2 * WRITE_BEHIND]).unwrap();
        drop(sink);
        assert_eq!(std::fs::read(&path).unwrap(), data);

        let mut src = FileSource::open(&path).unwrap();
        assert_eq!(src.len(), data.len() as u64);
        for &at in &[2_999_000u64, 0, 1_048_000, 5, 2_000_000] {
            let mut buf = vec![0u8; 1000];
            src.read_at(at, &mut buf).unwrap();
            assert_eq!(buf, data[at as usize..at as usize + 1000]);
        }
        // The file shrinks under the sender: a clear error, no panic.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        let mut src2 = FileSource {
            len: data.len() as u64,
            ..FileSource::open(&path).unwrap()
        };
        let err = src2.read_at(2_000_000, &mut [0u8; 1000]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
