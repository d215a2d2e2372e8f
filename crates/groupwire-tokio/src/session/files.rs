//! Files on a channel: [`Channel::send_file`] sends one, a
//! [`FileReceiver`] fed with the channel's messages stores it.
//!
//! A file travels as ordinary messages on a channel that delivers every
//! message ([`Reliability::Full`]: `Qos::bulk()` or
//! `Qos::reliable_ordered()`), whatever mechanism carries the channel and
//! however often the selector switches it: an offer (its name and size),
//! chunks (each with its offset, so the order they arrive in does not
//! matter), and an end with the BLAKE3 hash of the whole file, which the
//! receiver checks before it gives the file its name. Each message starts
//! with [`FILE_MAGIC`] and a kind byte, then the file's id (4 bytes), all
//! big-endian:
//!
//! | kind | body |
//! |---|---|
//! | `O` offer | size (8), name length (1), name (UTF-8) |
//! | `C` chunk | offset (8), bytes |
//! | `E` end | BLAKE3 hash (32) |
//!
//! Chunks are [`RELIABLE_CHUNK`] bytes on the stream (so another channel's
//! message waits behind at most one, [`SessionConfig::stream_window`]) and
//! [`BLAST_CHUNK`] bytes on Reliable Blast UDP (one transfer each: fewer
//! round trips of Start, Accept and Done).
//!
//! **What a peer can make the receiver do** is bounded: a name is a plain
//! file name (no directory part, no `..`), stored in the receiver's
//! directory only; a file may be at most [`FileReceiver::max_size`] bytes
//! and at most [`FileReceiver::max_files`] may be under way; chunks outside
//! the offered size fail the file; what has not arrived whole and matching
//! its hash stays under a `.part` name and is removed when it fails.
//!
//! [`SessionConfig::stream_window`]: groupwire_proto::session::SessionConfig::stream_window

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use groupwire_proto::session::{ChannelId, Mechanism, Reliability};
use tokio::io::AsyncReadExt;

use super::{Channel, SendError};

/// The first bytes of every file message.
pub const FILE_MAGIC: &[u8; 3] = b"gwF";
/// Chunk bytes per message on the reliable stream.
pub const RELIABLE_CHUNK: usize = 64 << 10;
/// Chunk bytes per message on Reliable Blast UDP.
pub const BLAST_CHUNK: usize = 1 << 20;
/// Longest file name.
pub(crate) const MAX_NAME: usize = 255;

const OFFER: u8 = b'O';
const CHUNK: u8 = b'C';
const END: u8 = b'E';
/// Magic, kind, id.
const HEAD: usize = FILE_MAGIC.len() + 1 + 4;

/// Why a file could not be sent or stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// Reading or writing the file.
    #[error("file: {0}")]
    Io(#[from] io::Error),
    /// The channel does not deliver every message.
    #[error(
        "a file needs a channel that delivers every message (Qos::bulk or Qos::reliable_ordered)"
    )]
    Unreliable,
    /// The name is not a plain file name of at most 255 bytes.
    #[error("{0:?} is not a plain file name")]
    BadName(String),
    /// Sending a message failed.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The peer's offer is over [`FileReceiver::max_size`], or past
    /// [`FileReceiver::max_files`] under way.
    #[error("refused: {0}")]
    Refused(String),
    /// A chunk outside the offered size, or an end for a file not offered.
    #[error("the peer broke the file protocol: {0}")]
    Protocol(String),
    /// Every byte arrived, but their hash is not the sender's.
    #[error("the file's BLAKE3 hash does not match: the data was corrupted")]
    HashMismatch,
}

/// A file [`Channel::send_file`] sent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileSent {
    /// Its id on the channel.
    pub id: u32,
    /// Bytes.
    pub size: u64,
    /// Its BLAKE3 hash.
    pub hash: [u8; 32],
}

impl Channel {
    /// Sends the file at `path` on this channel, under its file name (see
    /// the [module docs](self)); the peer stores it with a
    /// [`FileReceiver`]. Waits while the channel's queue is full
    /// ([`SendError::Full`]), so a file of any size streams through in
    /// bounded memory; returns once the last message is queued (the peer
    /// has it when its receiver says [`FileEvent::Done`]). The file is read
    /// off the runtime's threads (`tokio::fs`), so a slow disk does not
    /// stall the session's other channels.
    pub async fn send_file(&self, path: impl AsRef<Path>) -> Result<FileSent, FileError> {
        let path = path.as_ref();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| plain_name(n))
            .ok_or_else(|| FileError::BadName(path.display().to_string()))?;
        let reliable = {
            let g = self.shared.lock();
            g.machine.qos(self.id).map(|q| q.reliability)
        };
        if reliable != Some(Reliability::Full) {
            return Err(FileError::Unreliable);
        }
        let mut file = tokio::fs::File::open(path).await?;
        let size = file.metadata().await?.len();
        let mut id_bytes = [0u8; 4];
        getrandom::fill(&mut id_bytes).map_err(|e| io::Error::other(e.to_string()))?;
        let id = u32::from_be_bytes(id_bytes);
        let mut offer = head(OFFER, id);
        offer.extend_from_slice(&size.to_be_bytes());
        offer.push(name.len() as u8);
        offer.extend_from_slice(name.as_bytes());
        self.send_waiting(&offer).await?;
        let mut hasher = blake3::Hasher::new();
        let mut offset = 0u64;
        let mut buf = Vec::new();
        while offset < size {
            let chunk = match self.shared.lock().machine.mechanism(self.id) {
                Some(Mechanism::Blast) => BLAST_CHUNK,
                _ => RELIABLE_CHUNK,
            };
            let n = (size - offset).min(chunk as u64) as usize;
            buf.clear();
            buf.extend_from_slice(&head(CHUNK, id));
            buf.extend_from_slice(&offset.to_be_bytes());
            let at = buf.len();
            buf.resize(at + n, 0);
            file.read_exact(&mut buf[at..]).await?;
            hasher.update(&buf[at..]);
            self.send_waiting(&buf).await?;
            offset += n as u64;
        }
        let hash = *hasher.finalize().as_bytes();
        let mut end = head(END, id);
        end.extend_from_slice(&hash);
        self.send_waiting(&end).await?;
        Ok(FileSent { id, size, hash })
    }

    /// [`send`](Self::send), waiting (1 to 20 ms between tries) while the
    /// queue is full.
    async fn send_waiting(&self, msg: &[u8]) -> Result<(), SendError> {
        let mut pause = Duration::from_millis(1);
        loop {
            match self.send(msg) {
                Err(SendError::Full) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }
}

fn head(kind: u8, id: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEAD + 64);
    v.extend_from_slice(FILE_MAGIC);
    v.push(kind);
    v.extend_from_slice(&id.to_be_bytes());
    v
}

/// A name with no directory part, not `.` or `..`, of at most
/// `MAX_NAME` bytes.
fn plain_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= MAX_NAME && n != "." && n != ".." && !n.contains(['/', '\\', '\0'])
}

/// What a [`FileReceiver`] made of a message.
#[derive(Debug)]
#[non_exhaustive]
pub enum FileEvent {
    /// A file is coming.
    Offered {
        /// The channel it comes on.
        channel: ChannelId,
        /// Its id there.
        id: u32,
        /// Its name.
        name: String,
        /// Bytes.
        size: u64,
    },
    /// A chunk was stored.
    Progress {
        /// The channel.
        channel: ChannelId,
        /// The file's id.
        id: u32,
        /// Bytes stored so far.
        received: u64,
        /// Bytes in all.
        size: u64,
    },
    /// Every byte arrived and the hash matched: the file is at `path`.
    Done {
        /// The channel.
        channel: ChannelId,
        /// The file's id.
        id: u32,
        /// Where it is.
        path: PathBuf,
        /// Bytes.
        size: u64,
    },
    /// The file will not arrive (its `.part` is removed); later messages
    /// of it are ignored.
    Failed {
        /// The channel.
        channel: ChannelId,
        /// The file's id.
        id: u32,
        /// Why.
        error: FileError,
    },
}

/// A file being received.
#[derive(Debug)]
struct Incoming {
    file: File,
    part: PathBuf,
    path: PathBuf,
    size: u64,
    /// Byte ranges stored, start → end, merged.
    have: BTreeMap<u64, u64>,
    received: u64,
    /// The sender's hash, once its end came.
    hash: Option<[u8; 32]>,
    /// The hash of bytes `0..hashed`, every one of them stored.
    hasher: blake3::Hasher,
    hashed: u64,
}

impl Incoming {
    /// After `data` was stored at `offset`: extends the hash over the
    /// stored bytes from 0, `data` from memory and what was stored after
    /// it from the file.
    fn hash_on(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        if offset != self.hashed {
            return Ok(());
        }
        self.hasher.update(data);
        self.hashed += data.len() as u64;
        let stored = self.have.get(&0).copied().unwrap_or(0);
        if self.hashed == stored {
            // The usual case, chunks in order: nothing stored after it.
            return Ok(());
        }
        let mut buf = vec![0u8; RELIABLE_CHUNK];
        while self.hashed < stored {
            let n = (stored - self.hashed).min(buf.len() as u64) as usize;
            self.file.read_exact_at(&mut buf[..n], self.hashed)?;
            self.hasher.update(&buf[..n]);
            self.hashed += n as u64;
        }
        Ok(())
    }
}

/// Stores the files peers send with [`Channel::send_file`] in one
/// directory. Hand it every message of the channels files come on
/// ([`take`](Self::take)); messages that are not file messages are given
/// back untouched, so a channel may carry both.
///
/// `take` does its file work on the calling thread, bounded per message:
/// it writes the chunk, hashes it (the hash is kept up to date as the
/// file's bytes arrive in order, so the end reads nothing back; a chunk
/// that fills a gap hashes the bytes stored after it once), and, with the
/// last message, syncs and renames the file. An application whose event
/// loop must never wait on a disk calls it in
/// [`tokio::task::spawn_blocking`] or a thread of its own.
#[derive(Debug)]
pub struct FileReceiver {
    dir: PathBuf,
    /// Largest file accepted, bytes (default 1 GiB).
    pub max_size: u64,
    /// Most files under way at once (default 16).
    pub max_files: usize,
    files: BTreeMap<(ChannelId, u32), Incoming>,
    /// Files that failed or finished, whose late messages are ignored
    /// (bounded: the oldest forgotten first, in `over_order`).
    over: BTreeSet<(ChannelId, u32)>,
    over_order: VecDeque<(ChannelId, u32)>,
}

/// Finished or failed files remembered, so their late messages are
/// ignored rather than taken for a new file.
const REMEMBERED: usize = 1024;

impl FileReceiver {
    /// Stores files in `dir` (which must exist).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_size: 1 << 30,
            max_files: 16,
            files: BTreeMap::new(),
            over: BTreeSet::new(),
            over_order: VecDeque::new(),
        }
    }

    /// Takes one message of `channel`: `None` if it is not a file message
    /// (the application's own), else what it did.
    pub fn take(&mut self, channel: ChannelId, msg: &[u8]) -> Option<FileEvent> {
        if msg.len() < HEAD || &msg[..3] != FILE_MAGIC {
            return None;
        }
        let kind = msg[3];
        let id = u32::from_be_bytes(msg[4..8].try_into().expect("4 bytes"));
        let body = &msg[HEAD..];
        let key = (channel, id);
        if self.over.contains(&key) {
            return None;
        }
        let r = match kind {
            OFFER => self.offer(key, body),
            CHUNK => self.chunk(key, body),
            END => self.end(key, body),
            _ => return None,
        };
        Some(match r {
            Ok(ev) => ev,
            Err(error) => {
                self.finish(key);
                FileEvent::Failed { channel, id, error }
            }
        })
    }

    /// Forgets `key`'s file: its `.part` goes, its late messages are
    /// ignored.
    fn finish(&mut self, key: (ChannelId, u32)) {
        if let Some(f) = self.files.remove(&key) {
            let _ = std::fs::remove_file(&f.part);
        }
        if self.over.len() >= REMEMBERED
            && let Some(oldest) = self.over_order.pop_front()
        {
            self.over.remove(&oldest);
        }
        if self.over.insert(key) {
            self.over_order.push_back(key);
        }
    }

    fn offer(&mut self, key: (ChannelId, u32), body: &[u8]) -> Result<FileEvent, FileError> {
        let bad = || FileError::Protocol("a short offer".into());
        let size = u64::from_be_bytes(body.get(..8).ok_or_else(bad)?.try_into().expect("8"));
        let len = usize::from(*body.get(8).ok_or_else(bad)?);
        let name = body.get(9..9 + len).ok_or_else(bad)?;
        let name = std::str::from_utf8(name)
            .ok()
            .filter(|n| plain_name(n))
            .ok_or_else(|| FileError::BadName(String::from_utf8_lossy(name).into_owned()))?;
        if self.files.contains_key(&key) {
            return Err(FileError::Protocol("a second offer".into()));
        }
        if size > self.max_size {
            return Err(FileError::Refused(format!(
                "{size} bytes is over the {}-byte limit",
                self.max_size
            )));
        }
        if self.files.len() >= self.max_files {
            return Err(FileError::Refused(format!(
                "{} files already under way",
                self.files.len()
            )));
        }
        let path = self.dir.join(name);
        let part = self.dir.join(format!("{name}.{:08x}.part", key.1));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&part)?;
        file.set_len(size)?;
        self.files.insert(
            key,
            Incoming {
                file,
                part,
                path,
                size,
                have: BTreeMap::new(),
                received: 0,
                hash: None,
                hasher: blake3::Hasher::new(),
                hashed: 0,
            },
        );
        Ok(FileEvent::Offered {
            channel: key.0,
            id: key.1,
            name: name.to_owned(),
            size,
        })
    }

    fn chunk(&mut self, key: (ChannelId, u32), body: &[u8]) -> Result<FileEvent, FileError> {
        let f = self
            .files
            .get_mut(&key)
            .ok_or_else(|| FileError::Protocol("a chunk of a file not offered".into()))?;
        let offset = u64::from_be_bytes(
            body.get(..8)
                .ok_or_else(|| FileError::Protocol("a short chunk".into()))?
                .try_into()
                .expect("8"),
        );
        let data = &body[8..];
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= f.size)
            .ok_or_else(|| FileError::Protocol("a chunk past the offered size".into()))?;
        if add_range(&mut f.have, offset, end) {
            f.file.write_all_at(data, offset)?;
            f.received += end - offset;
            f.hash_on(offset, data)?;
        }
        self.complete(key)
    }

    fn end(&mut self, key: (ChannelId, u32), body: &[u8]) -> Result<FileEvent, FileError> {
        let f = self
            .files
            .get_mut(&key)
            .ok_or_else(|| FileError::Protocol("an end of a file not offered".into()))?;
        let hash: [u8; 32] = body
            .try_into()
            .map_err(|_| FileError::Protocol("an end without a 32-byte hash".into()))?;
        f.hash = Some(hash);
        self.complete(key)
    }

    /// `key`'s file after a chunk or its end: once every byte and the
    /// hash are in, checked and named ([`FileEvent::Done`]), else how far
    /// it has come.
    fn complete(&mut self, key: (ChannelId, u32)) -> Result<FileEvent, FileError> {
        let f = self.files.get(&key).expect("the caller found it");
        let Some(want) = f.hash.filter(|_| f.hashed == f.size) else {
            return Ok(FileEvent::Progress {
                channel: key.0,
                id: key.1,
                received: f.received,
                size: f.size,
            });
        };
        if *f.hasher.finalize().as_bytes() != want {
            return Err(FileError::HashMismatch);
        }
        f.file.sync_all()?;
        std::fs::rename(&f.part, &f.path)?;
        let (path, size) = (f.path.clone(), f.size);
        self.files.remove(&key);
        self.finish(key);
        Ok(FileEvent::Done {
            channel: key.0,
            id: key.1,
            path,
            size,
        })
    }
}

impl Drop for FileReceiver {
    /// Files not finished leave no `.part` behind.
    fn drop(&mut self) {
        for f in self.files.values() {
            let _ = std::fs::remove_file(&f.part);
        }
    }
}

/// Adds `[start, end)` to the merged ranges in `have`; `false` if any of
/// it was there already (the chunk is then ignored: a message is
/// delivered once, so only a broken or hostile sender overlaps).
fn add_range(have: &mut BTreeMap<u64, u64>, start: u64, end: u64) -> bool {
    if start == end {
        return false;
    }
    let before = have.range(..=start).next_back().map(|(&s, &e)| (s, e));
    if before.is_some_and(|(_, e)| e > start) {
        return false;
    }
    let after = have.range(start..).next().map(|(&s, &e)| (s, e));
    if after.is_some_and(|(s, _)| s < end) {
        return false;
    }
    let (mut s, mut e) = (start, end);
    if let Some((bs, be)) = before.filter(|&(_, be)| be == start) {
        have.remove(&bs);
        s = bs;
        let _ = be;
    }
    if let Some((as_, ae)) = after.filter(|&(as_, _)| as_ == end) {
        have.remove(&as_);
        e = ae;
    }
    have.insert(s, e);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CH: ChannelId = ChannelId {
        peer: groupwire_proto::session::PeerId(1),
        id: 3,
    };

    /// The messages `send_file` would send for `data` named `name`, with
    /// chunks of `chunk` bytes.
    fn messages(id: u32, name: &str, data: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut offer = head(OFFER, id);
        offer.extend_from_slice(&(data.len() as u64).to_be_bytes());
        offer.push(name.len() as u8);
        offer.extend_from_slice(name.as_bytes());
        out.push(offer);
        for (i, c) in data.chunks(chunk.max(1)).enumerate() {
            let mut m = head(CHUNK, id);
            m.extend_from_slice(&((i * chunk.max(1)) as u64).to_be_bytes());
            m.extend_from_slice(c);
            out.push(m);
        }
        let mut end = head(END, id);
        end.extend_from_slice(blake3::hash(data).as_bytes());
        out.push(end);
        out
    }

    proptest! {
        #[test]
        fn a_file_arrives_whole_whatever_order_its_chunks_and_end_take(
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            chunk in 1usize..700,
            seed: u64,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut msgs = messages(7, "f.bin", &data, chunk);
            // The offer first (a file's chunks are ignored before it);
            // the rest in any order.
            let mut rest = msgs.split_off(1);
            let mut rng = seed;
            for i in (1..rest.len()).rev() {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                rest.swap(i, (rng >> 33) as usize % (i + 1));
            }
            msgs.extend(rest);
            let mut rx = FileReceiver::new(dir.path());
            let mut done = None;
            for m in &msgs {
                match rx.take(CH, m) {
                    Some(FileEvent::Done { path, .. }) => done = Some(path),
                    Some(FileEvent::Failed { error, .. }) => prop_assert!(false, "{error}"),
                    _ => {}
                }
            }
            let path = done.expect("done");
            prop_assert_eq!(std::fs::read(path).unwrap(), data);
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        }

        #[test]
        fn hostile_messages_never_panic_and_never_leave_the_directory(
            msgs in proptest::collection::vec(
                (0u8..4, 0u32..3, proptest::collection::vec(any::<u8>(), 0..64)),
                1..60,
            ),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let inbox = dir.path().join("in");
            std::fs::create_dir_all(&inbox).unwrap();
            let mut rx = FileReceiver::new(&inbox);
            rx.max_size = 4096;
            for (kind, id, body) in msgs {
                let kind = [OFFER, CHUNK, END, b'X'][usize::from(kind)];
                let mut m = head(kind, id);
                m.extend_from_slice(&body);
                let _ = rx.take(CH, &m);
            }
            drop(rx);
            // Only the inbox, and in it only finished files' plain names.
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
            for e in std::fs::read_dir(&inbox).unwrap() {
                let name = e.unwrap().file_name().into_string().unwrap();
                prop_assert!(!name.ends_with(".part"), "{name}");
            }
        }
    }

    #[test]
    fn ranges_merge_and_overlaps_are_refused() {
        let mut h = BTreeMap::new();
        assert!(add_range(&mut h, 10, 20));
        assert!(add_range(&mut h, 0, 10));
        assert!(add_range(&mut h, 30, 40));
        assert!(!add_range(&mut h, 15, 25));
        assert!(!add_range(&mut h, 35, 36));
        assert!(!add_range(&mut h, 5, 5));
        assert!(add_range(&mut h, 20, 30));
        assert_eq!(h.into_iter().collect::<Vec<_>>(), vec![(0, 40)]);
    }

    #[test]
    fn only_plain_names_pass() {
        for ok in ["a.bin", "model 7.npy", "é"] {
            assert!(plain_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "x\0"] {
            assert!(!plain_name(bad), "{bad:?}");
        }
        assert!(!plain_name(&"x".repeat(MAX_NAME + 1)));
    }
}
