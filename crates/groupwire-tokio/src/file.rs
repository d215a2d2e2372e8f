//! Files as bulk payloads ([`crate::rbudp`], [`crate::striped`]): a
//! [`FileSource`] that reads ahead and a [`FileSink`] that writes behind,
//! so a blast of 1400-byte packets costs one system call per megabyte, not
//! one per packet.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use groupwire_proto::rbudp::{BlastSink, BlastSource, Partial, ResumeKey};

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

    /// The file's version, for a resumable transfer: a hash of its device,
    /// inode, length and modification time (as rsync and make decide a
    /// file changed). Writing to the file changes it; a partial kept by a
    /// receiver for another version is discarded, not resumed.
    pub fn version(&self) -> io::Result<u64> {
        let m = self.file.metadata()?;
        let mut h = blake3::Hasher::new();
        for v in [m.dev(), m.ino(), m.len()] {
            h.update(&v.to_be_bytes());
        }
        h.update(&m.mtime().to_be_bytes());
        h.update(&m.mtime_nsec().to_be_bytes());
        let mut out = [0u8; 8];
        out.copy_from_slice(&h.finalize().as_bytes()[..8]);
        Ok(u64::from_be_bytes(out))
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
///
/// Made with [`resumable`](Self::resumable), it keeps a record of which
/// packets are stored next to the file ([`record_path`](Self::record_path)),
/// so an interrupted Reliable Blast UDP transfer resumes where it stopped.
#[derive(Debug)]
pub struct FileSink {
    file: File,
    pending: Vec<u8>,
    /// The file offset of `pending[0]`.
    pending_at: u64,
    /// Where the resume record goes, for a resumable sink.
    record: Option<PathBuf>,
}

/// The resume record's first bytes.
const RECORD_MAGIC: &[u8; 8] = b"GWRBRES1";
/// Bytes of the record before the tally: magic, size, packet size (and 4
/// reserved), version, words.
const RECORD_HEADER: usize = 40;

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
            record: None,
        }
    }

    /// Opens `path` for a transfer that may resume: a file that is there
    /// is kept (not truncated) and, with its record
    /// ([`record_path`](Self::record_path)), resumed by a transfer of the
    /// same payload and version, or overwritten by any other.
    ///
    /// The record is written after the bytes it claims (about once a
    /// second), so a killed process or a dropped connection loses at most
    /// the last second. It is not synced to disk: after a power cut the
    /// file may lack bytes the record claims; the end-to-end hash catches
    /// that, the transfer fails, and the record is forgotten, so the next
    /// attempt starts over.
    pub fn resumable(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut sink = Self::from_file(file);
        sink.record = Some(Self::record_path(path));
        Ok(sink)
    }

    /// Where [`resumable`](Self::resumable) keeps the record of a
    /// transfer into `path`: `PATH.resume`.
    pub fn record_path(path: impl AsRef<Path>) -> PathBuf {
        let mut p = path.as_ref().as_os_str().to_owned();
        p.push(".resume");
        PathBuf::from(p)
    }

    /// Reads the record at `path` if it is `key`'s: the tally's words.
    fn read_record(&self, path: &Path, key: &ResumeKey) -> io::Result<Option<Vec<u64>>> {
        let packets = key.size.div_ceil(u64::from(key.packet_size.max(1)));
        let words = packets.div_ceil(64);
        let want = words
            .checked_mul(8)
            .and_then(|w| w.checked_add(RECORD_HEADER as u64));
        // Only a record of exactly the right length is read at all.
        if want != Some(std::fs::metadata(path)?.len()) || self.file.metadata()?.len() != key.size {
            return Ok(None);
        }
        let bytes = std::fs::read(path)?;
        let (header, tally) = bytes.split_at(RECORD_HEADER);
        if header != record_header(key, words) {
            return Ok(None);
        }
        Ok(Some(
            tally
                .chunks_exact(8)
                .map(|c| c.try_into().map_or(0, u64::from_be_bytes))
                .collect(),
        ))
    }
}

/// The resume record's first [`RECORD_HEADER`] bytes for `key` and a
/// tally of `words` words: what [`FileSink::checkpoint`] writes, and what
/// a record must start with to be resumed.
fn record_header(key: &ResumeKey, words: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER);
    out.extend_from_slice(RECORD_MAGIC);
    out.extend_from_slice(&key.size.to_be_bytes());
    out.extend_from_slice(&key.packet_size.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&key.version.to_be_bytes());
    out.extend_from_slice(&words.to_be_bytes());
    out
}

/// Removes `path`; one that is not there is no error.
fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl FileSink {
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

    fn resume(&mut self, key: &ResumeKey) -> io::Result<Partial> {
        let Some(path) = self.record.clone() else {
            return Ok(Partial::None);
        };
        if !path.exists() {
            return Ok(Partial::None);
        }
        match self.read_record(&path, key)? {
            Some(words) => Ok(Partial::Held(words)),
            None => {
                remove_if_there(&path)?;
                Ok(Partial::Discarded)
            }
        }
    }

    fn checkpoint(&mut self, key: &ResumeKey, tally: &[u64]) -> io::Result<()> {
        let Some(path) = self.record.clone() else {
            return Ok(());
        };
        // The bytes first, then the record that claims them.
        self.flush()?;
        let mut out = record_header(key, tally.len() as u64);
        out.reserve(tally.len() * 8);
        for w in tally {
            out.extend_from_slice(&w.to_be_bytes());
        }
        // Replace the record whole: a crash leaves the old one or the new.
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, &out)?;
        std::fs::rename(&tmp, &path)
    }

    fn completed(&mut self) -> io::Result<()> {
        match self.record.clone() {
            Some(path) => remove_if_there(&path),
            None => Ok(()),
        }
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

    #[test]
    fn a_resumable_sink_keeps_its_record_for_the_same_version_only() {
        let dir = std::env::temp_dir().join(format!("gw-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("payload.part");
        let record = FileSink::record_path(&path);
        let key = ResumeKey {
            size: 5000,
            packet_size: 1000,
            version: 77,
        };
        let mut sink = FileSink::resumable(&path).unwrap();
        assert_eq!(sink.resume(&key).unwrap(), Partial::None);
        sink.prepare(5000).unwrap();
        sink.write_at(1000, &[7; 1000]).unwrap();
        sink.write_at(2000, &[8; 1000]).unwrap();
        // Bytes still gathered are read back from memory.
        let mut back = [0u8; 1500];
        sink.read_at(1200, &mut back).unwrap();
        assert_eq!(&back[..800], &[7; 800]);
        assert_eq!(&back[800..], &[8; 700]);
        sink.checkpoint(&key, &[0b110]).unwrap();
        drop(sink);

        // The same payload and version: the tally comes back, the bytes
        // are where they were.
        let mut sink = FileSink::resumable(&path).unwrap();
        assert_eq!(sink.resume(&key).unwrap(), Partial::Held(vec![0b110]));
        let mut back = [0u8; 1000];
        sink.read_at(2000, &mut back).unwrap();
        assert_eq!(back, [8; 1000]);
        drop(sink);

        // Another version: discarded, and the record is gone.
        let mut sink = FileSink::resumable(&path).unwrap();
        let changed = ResumeKey { version: 78, ..key };
        assert_eq!(sink.resume(&changed).unwrap(), Partial::Discarded);
        assert!(!record.exists());
        sink.checkpoint(&key, &[1]).unwrap();
        sink.completed().unwrap();
        assert!(!record.exists(), "a completed transfer leaves no record");

        // A record cut short is not read.
        let mut sink = FileSink::resumable(&path).unwrap();
        sink.checkpoint(&key, &[1]).unwrap();
        let bytes = std::fs::read(&record).unwrap();
        std::fs::write(&record, &bytes[..bytes.len() - 3]).unwrap();
        assert_eq!(sink.resume(&key).unwrap(), Partial::Discarded);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
