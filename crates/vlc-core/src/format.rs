//! The index file: one fixed little-endian header, a section table, and 64-byte aligned
//! sections each with a CRC-32, so an index can be opened as a zero-copy memory map.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "VLCINDEX"
//!      8     4  format version (u32) = 10 (versions 1 to 9 are read too)
//!     12     4  header size (u32) = 64
//!     16     4  dim (u32)
//!     20     4  num_anchors (u32)
//!     24     8  num_vectors (u64)
//!     32     1  metric (0 = l2, 1 = cosine)
//!     33     1  primary codec kind
//!     34     1  refine codec kind (0xFF = none)
//!     35     1  flags: bit 0 = anchors stored as f16, bit 1 (version 2) = anchors stored as
//!                 int8 with an f32 scale per anchor, bit 2 (version 3) = anchors stored as
//!                 int4 with an f32 scale per anchor (at most one of them; other bits 0)
//!     36     4  section count (u32, at most 16)
//!     40     8  file size (u64)
//!     48     4  CRC-32 of the section table
//!     52     8  reserved (0)
//!     60     4  CRC-32 of bytes 0..60
//!     64  32·S  section table: tag [4], reserved u32, offset u64, length u64, CRC-32 u32, reserved u32
//! ```
//! Sections (all offsets multiples of 64): `CNTR` (version 9, optional) the centre, dim f32
//! subtracted from every vector and query (see [`crate::Index::centre`]); `ANCH` anchors
//! (num_anchors, dim) as f32, f16, or int8 (the num_anchors f32 scales first, see
//! [`crate::anchor_store`]); `LOFF` list offsets u64 (num_anchors + 1); `IDSP` ids bit-packed
//! at the width of the largest (version 3, see [`crate::ids`]), `IDEF` ids coded by
//! Elias-Fano per list (version 10, instead of `IDSP`), or `IDS_` ids u32 (num_vectors;
//! versions 1 and 2); `CPAR` primary codec parameters; `CODE` primary codes (num_vectors,
//! code_size); `RPAR`/`RCOD` the refine tier; `META` build report (JSON).
//!
//! Version 4 changed codes only: the full-code factors of the multi-bit RaBitQ codes and of
//! `pcaq` are stored like their first stage's (two scaled `f16`, 4 bytes less per vector;
//! their format follows the first stage's in the codec parameters), and `pcaq` may leave
//! principal axes uncoded at any bit rate. Older files keep `f32` full-code factors.
//!
//! Version 5 changed `pcaq` parameters only: a tag byte after the widths says how the rotation's
//! rows are stored (0 = f16 as before, 1 = int8 with an f32 scale per row, orthonormalised when
//! read: half the bytes).
//!
//! Version 6 changed the per-vector factors of the RaBitQ-family codes (`rabitq1`-`4`,
//! `pcaq`): each stage's two factors are stored as 8- or 16-bit integers over a range fitted to
//! the training sample (factor format tags 2 and 3 in the codec parameters, with the ranges;
//! see [`crate::codec::FactorFormat`]), 2 or 4 bytes a stage instead of f16's 4: 2 to 4 bytes
//! less per vector. Older files keep their f16 or f32 factors.
//!
//! Version 7 added codec kinds 10 to 13, `rabitq5` to `rabitq8` (extended RaBitQ with 5 to 8
//! bits per dimension, laid out like `rabitq2`-`4` with more low planes). Nothing else
//! changed: the version tells a reader built before them that it cannot read such a file,
//! and a file of an earlier version that names one of them is rejected as corrupt.
//!
//! Version 8 let `pcaq` give a principal axis up to 12 bits instead of 8 (the widths in its
//! parameters; see [`crate::codec::pca::MAX_DIM_BITS`]). The first stage of a code with such
//! axes holds one more bit plane per bit past 8 on them (the layout follows from the widths;
//! see [`crate::codec::pca`]), and codes without them are laid out as before. Nothing else
//! changed: a reader built before it reports the newer version, and an earlier version's file
//! with a width above 8 is rejected as corrupt.
//!
//! Version 9 added the optional `CNTR` section: an index of data whose mean lies far from the
//! origin holds its vectors, anchors and codes translated by minus that centre, and search
//! translates queries the same way. Nothing else changed; a file without the section reads as
//! before, and an earlier version's file that has one is rejected as corrupt (a reader built
//! before version 9 reports the newer version instead of ignoring the section and answering
//! wrongly).
//!
//! Version 10 added the `IDEF` section, which a writer puts in place of `IDSP` where every
//! list's ids ascend and Elias-Fano codes them in fewer bits (see [`crate::ids`]): about
//! `2 + log2(num_anchors)` bits an id instead of the largest id's bit length. Nothing else
//! changed; an earlier version's file with `IDEF` is rejected as corrupt, and so is a file
//! with both id sections.
//!
//! Every size read from a file is checked against the file length with checked arithmetic
//! before anything is allocated or indexed.

use crate::anchor_store::{AnchorPrecision, StoredAnchors};
use crate::codec::{Codec, CodecKind, ResidualCodec};
use crate::error::{Result, VlcError};
use crate::ids::{IdSection, Ids, ListIds};
use crate::index::{BuildReport, Index, Metric};
use memmap2::Mmap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const MAGIC: [u8; 8] = *b"VLCINDEX";
pub const FORMAT_VERSION: u32 = 10;
pub const HEADER_SIZE: usize = 64;
const ENTRY_SIZE: usize = 32;
const MAX_SECTIONS: usize = 16;
const ALIGN: u64 = 64;
const NO_REFINE: u8 = 0xFF;
const FLAG_F16_ANCHORS: u8 = 1;
const FLAG_INT8_ANCHORS: u8 = 2;
const FLAG_INT4_ANCHORS: u8 = 4;

/// A typed array that is either owned or borrowed from a memory-mapped file.
pub enum Section<T> {
    Owned(Vec<T>),
    Mapped {
        map: Arc<Mmap>,
        offset: usize,
        len: usize,
    },
}

impl<T: bytemuck::Pod> std::ops::Deref for Section<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Section::Owned(v) => v,
            // Alignment and bounds were checked when the section was created (`view`).
            Section::Mapped { map, offset, len } => {
                bytemuck::cast_slice(&map[*offset..*offset + *len * std::mem::size_of::<T>()])
            }
        }
    }
}

struct Entry {
    tag: [u8; 4],
    offset: u64,
    length: u64,
    crc: u32,
}

pub(crate) struct Layout {
    pub total: u64,
}

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

fn as_bytes<T: bytemuck::Pod>(s: &[T]) -> &[u8] {
    bytemuck::cast_slice(s)
}

/// The sections of an index in file order, as byte slices.
fn sections<'a>(index: &'a Index, e: &'a Encoded<'a>) -> Vec<([u8; 4], &'a [u8])> {
    let (anchors, params, refine_params, meta) = (
        &index.stored_anchors.bytes[..],
        &e.params[..],
        &e.refine_params[..],
        &e.meta[..],
    );
    // Little-endian targets only (checked at compile time below), so typed slices are their
    // on-disk bytes.
    let mut s: Vec<([u8; 4], &[u8])> = Vec::new();
    if let Some(centre) = &index.centre {
        s.push((*b"CNTR", as_bytes(centre)));
    }
    s.extend([
        (*b"ANCH", anchors),
        (*b"LOFF", as_bytes(&index.list_offsets)),
        match &e.ids {
            IdSection::Packed(words) => (*b"IDSP", as_bytes(words)),
            IdSection::PerList(words) => (*b"IDEF", as_bytes(words)),
        },
        (*b"CPAR", params),
        (*b"CODE", &index.codes),
    ]);
    if let Some((_, codes)) = &index.refine {
        s.push((*b"RPAR", refine_params));
        s.push((*b"RCOD", codes));
    }
    s.push((*b"META", meta));
    s
}

#[cfg(not(target_endian = "little"))]
compile_error!("the VLC index format is written by little-endian targets only");

/// The serialised small sections of an index.
struct Encoded<'a> {
    params: Vec<u8>,
    refine_params: Vec<u8>,
    meta: Vec<u8>,
    /// The `IDSP` or `IDEF` section: the index's ids (packed here when it holds them plain,
    /// loaded from an older file).
    ids: IdSection<'a>,
}

fn encode_params(index: &Index) -> Encoded<'_> {
    let mut params = Vec::new();
    index.codec.write_params(&mut params);
    let mut refine_params = Vec::new();
    if let Some((c, _)) = &index.refine {
        c.write_params(&mut refine_params);
    }
    let meta = serde_json::to_vec(&index.report).unwrap_or_default();
    Encoded {
        params,
        refine_params,
        meta,
        ids: index.ids.section(),
    }
}

pub(crate) fn layout(index: &Index) -> Layout {
    let encoded = encode_params(index);
    let secs = sections(index, &encoded);
    Layout {
        total: file_size_for(secs.iter().map(|(_, bytes)| bytes.len())),
    }
}

/// Bytes of a file whose sections, in file order, have these lengths: the header and the
/// section table, then each section at the next aligned offset, the file padded to alignment.
pub(crate) fn file_size_for(section_lengths: impl ExactSizeIterator<Item = usize>) -> u64 {
    let mut at = align((HEADER_SIZE + ENTRY_SIZE * section_lengths.len()) as u64);
    for length in section_lengths {
        at = align(at + length as u64);
    }
    at
}

/// Serialise `index` to bytes (header, table, sections).
pub fn to_bytes(index: &Index) -> Vec<u8> {
    let mut out = Vec::with_capacity(layout(index).total as usize);
    write_index(index, &mut out).expect("writing to memory cannot fail");
    out
}

/// Write `index` in the file format (header, table, sections) to `out`, a section at a time
/// from where the index holds it: nothing but the header, table and small sections is copied.
/// Returns the bytes written.
pub fn write_index(index: &Index, out: &mut dyn Write) -> std::io::Result<u64> {
    let encoded = encode_params(index);
    let secs = sections(index, &encoded);
    let mut entries = Vec::new();
    let mut at = align((HEADER_SIZE + ENTRY_SIZE * secs.len()) as u64);
    for (tag, bytes) in &secs {
        entries.push(Entry {
            tag: *tag,
            offset: at,
            length: bytes.len() as u64,
            crc: crc32fast::hash(bytes),
        });
        at = align(at + bytes.len() as u64);
    }
    let total = at;
    let mut table = Vec::with_capacity(entries.len() * ENTRY_SIZE);
    for e in &entries {
        table.extend(e.tag);
        table.extend(0u32.to_le_bytes());
        table.extend(e.offset.to_le_bytes());
        table.extend(e.length.to_le_bytes());
        table.extend(e.crc.to_le_bytes());
        table.extend(0u32.to_le_bytes());
    }
    let mut head = Vec::with_capacity(HEADER_SIZE + table.len());
    head.extend(MAGIC);
    head.extend(FORMAT_VERSION.to_le_bytes());
    head.extend((HEADER_SIZE as u32).to_le_bytes());
    head.extend((index.dim as u32).to_le_bytes());
    head.extend((index.num_anchors() as u32).to_le_bytes());
    head.extend((index.num_vectors as u64).to_le_bytes());
    head.push(index.metric as u8);
    head.push(index.codec.kind() as u8);
    head.push(
        index
            .refine
            .as_ref()
            .map_or(NO_REFINE, |r| r.0.kind() as u8),
    );
    head.push(match index.stored_anchors.precision {
        AnchorPrecision::F32 => 0,
        AnchorPrecision::F16 => FLAG_F16_ANCHORS,
        AnchorPrecision::Int8 => FLAG_INT8_ANCHORS,
        AnchorPrecision::Int4 => FLAG_INT4_ANCHORS,
    });
    head.extend((entries.len() as u32).to_le_bytes());
    head.extend(total.to_le_bytes());
    head.extend(crc32fast::hash(&table).to_le_bytes());
    head.extend([0u8; 8]);
    let crc = crc32fast::hash(&head[..60]);
    head.extend(crc.to_le_bytes());
    head.extend(&table);
    out.write_all(&head)?;
    let mut written = head.len() as u64;
    let pad_to = |out: &mut dyn Write, written: &mut u64, to: u64| -> std::io::Result<()> {
        const ZEROS: [u8; ALIGN as usize] = [0; ALIGN as usize];
        while *written < to {
            let n = (to - *written).min(ALIGN) as usize;
            out.write_all(&ZEROS[..n])?;
            *written += n as u64;
        }
        Ok(())
    };
    for (e, (_, bytes)) in entries.iter().zip(&secs) {
        pad_to(out, &mut written, e.offset)?;
        out.write_all(bytes)?;
        written += bytes.len() as u64;
    }
    pad_to(out, &mut written, total)?;
    Ok(written)
}

/// Write `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename,
/// fsync of the directory. On any error the temporary file is removed and `path` is untouched.
/// Where `path` is a symbolic link, the file it leads to is the one replaced (in that file's
/// directory) and the link stays; where the file exists, the new one gets its permissions
/// (an index kept private stays private).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, &mut |f| f.write_all(bytes))
}

/// [`write_atomic`] of what `write` writes to the temporary file.
pub fn write_atomic_with(
    path: &Path,
    write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let (path, dir, prefix) = atomic_target(path)?;
    let path = path.as_path();
    let permissions = std::fs::metadata(path).ok().map(|m| m.permissions());
    remove_stale_temporaries(&dir, &prefix);
    // Registered until this function returns (the entry drops after the rename or removal).
    let unfinished = Unfinished::register(&dir, &prefix);
    let tmp = &unfinished.0;
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)?;
        let mut buffered = std::io::BufWriter::with_capacity(1 << 20, &mut f);
        write(&mut buffered)?;
        buffered.flush()?;
        drop(buffered);
        f.sync_all()?;
        // Once written: a read-only original's mode must not stop the writes.
        if let Some(permissions) = permissions {
            f.set_permissions(permissions)?;
        }
        drop(f);
        std::fs::rename(tmp, path)?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        VlcError::io(path, e)
    })
}

/// Where [`write_atomic_with`] writes for `path`: the file it replaces (a link followed), its
/// directory, and the prefix of the temporary file's name there.
fn atomic_target(path: &Path) -> Result<(PathBuf, PathBuf, String)> {
    // Renaming over a link would replace the link with a file and leave the file it names as
    // it was. A dangling link has no file to replace: it is replaced itself, as a file would be.
    let resolved = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).ok(),
        _ => None,
    };
    let path = resolved.unwrap_or_else(|| path.to_path_buf());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| VlcError::param("path", format!("{} names no file", path.display())))?;
    let prefix = temporary_prefix(name);
    Ok((path, dir, prefix))
}

/// Whether [`write_atomic`] to `path` could write its file, checked before long work whose
/// result goes there: `path` must not be a directory, and a temporary file must be creatable
/// beside it (so its directory exists and takes new files). The probe file is removed at once
/// (and by [`remove_unfinished_writes`] if the process is interrupted meanwhile). A full disk
/// or a file replaced meanwhile can still fail the write itself.
pub fn check_writable(path: &Path) -> Result<()> {
    let (target, dir, prefix) = atomic_target(path)?;
    if std::fs::metadata(&target).is_ok_and(|m| m.is_dir()) {
        return Err(VlcError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::IsADirectory, "it is a directory"),
        ));
    }
    let probe = Unfinished::register(&dir, &prefix);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe.0)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if !dir.exists() => VlcError::io(
                &dir,
                std::io::Error::new(e.kind(), "the directory does not exist"),
            ),
            _ => VlcError::io(path, e),
        })?;
    let _ = std::fs::remove_file(&probe.0);
    Ok(())
}

/// An exclusive advisory lock on `INDEX.lock`, the file beside the one `index` names (links
/// followed, so that every path to an index shares one lock), for a program that reads an
/// index, changes it and writes it back in place: the `vlc add` and `vlc remove` commands
/// hold it while they do, and a program that changes an index through this library (or
/// Python's `vlc_index.lock`) should hold it too, so that concurrent changes take turns
/// instead of the later write dropping the earlier change. The lock file is created if
/// missing and left in place (removing it would let a waiting process lock a file no later
/// process sees). Searches need no lock: a write replaces the index by a rename, so a reader
/// keeps the index it opened. Released when dropped.
#[derive(Debug)]
pub struct IndexLock {
    /// Holds the lock while open.
    _file: std::fs::File,
    path: PathBuf,
}

impl IndexLock {
    /// Takes the lock on `index`'s lock file, waiting for it; where another process (or
    /// another lock in this one) holds it, `on_wait` is called with the lock file's path
    /// before waiting (to say so). I/O errors name the lock file.
    pub fn acquire(index: &Path, on_wait: &mut dyn FnMut(&Path)) -> Result<IndexLock> {
        let resolved = std::fs::canonicalize(index).ok();
        let mut name = resolved.as_deref().unwrap_or(index).as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| VlcError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                on_wait(&path);
                file.lock().map_err(|e| VlcError::io(&path, e))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(VlcError::io(&path, e)),
        }
        Ok(IndexLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The temporary files this process is writing (see [`write_atomic_with`]).
static UNFINISHED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// An entry of [`UNFINISHED`] for as long as its write runs.
struct Unfinished(PathBuf);

impl Unfinished {
    /// A new temporary file name in `dir`: `prefix`, the process id, and a number of its own.
    fn register(dir: &Path, prefix: &str) -> Unfinished {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("{prefix}{}-{number}", std::process::id()));
        lock_unfinished().push(path.clone());
        Unfinished(path)
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let mut unfinished = lock_unfinished();
        if let Some(i) = unfinished.iter().position(|p| *p == self.0) {
            unfinished.swap_remove(i);
        }
    }
}

fn lock_unfinished() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // The list stays sound if a thread panicked while holding it (a push or a removal).
    UNFINISHED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes the temporary files of the atomic writes ([`write_atomic`], [`write_atomic_with`],
/// [`Index::save`]) under way in this process and returns their paths: for a program that is
/// about to end on an interrupt (the `vlc` command calls it on SIGINT, SIGTERM and SIGHUP), so
/// that no partial file is left behind. The files the writes would have replaced are untouched.
/// Writes still running fail when they come to rename their file, with an I/O error, and
/// replace nothing; the list's lock is held until the call returns, so a write that starts
/// meanwhile waits.
pub fn remove_unfinished_writes() -> Vec<PathBuf> {
    let unfinished = lock_unfinished();
    let mut removed = Vec::new();
    for path in unfinished.iter() {
        if std::fs::remove_file(path).is_ok() {
            removed.push(path.clone());
        }
    }
    removed
}

/// The start of the name of a temporary file for `name`; the writer's process id and a number
/// follow (`.NAME.tmp-PID-N`; before session 64 `.NAME.tmp-PID`).
fn temporary_prefix(name: &std::ffi::OsStr) -> String {
    format!(".{}.tmp-", name.to_string_lossy())
}

/// Removes the temporary files for `prefix` in `dir` left by processes that have ended (killed,
/// or a machine that lost power, mid-write): a hidden partial index can be as large as the
/// index. A file whose process still runs on this machine, or where that cannot be told, is
/// left alone; one named with this process's id that none of its writes holds was left by an
/// ended process that had the same id.
fn remove_stale_temporaries(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| match rest.split_once('-') {
                Some((pid, number)) if all_digits(number) => Some(pid),
                Some(_) => None,
                None => Some(rest),
            })
            .filter(|pid| all_digits(pid))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let stale = if pid == std::process::id() {
            !lock_unfinished().contains(&path)
        } else {
            process_has_ended(pid)
        };
        if stale {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Whether no process with this id runs on this machine (false where that cannot be told).
#[cfg(unix)]
fn process_has_ended(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: `kill` with signal 0 sends nothing; it only checks that the process exists (and
    // that we may signal it). It takes plain integers and touches no memory of ours.
    let result = unsafe { libc::kill(pid, 0) };
    result != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn process_has_ended(_pid: u32) -> bool {
    false
}

/// Validated header and section table of an index file.
#[derive(Clone, Debug)]
pub struct FileInfo {
    pub version: u32,
    pub dim: usize,
    pub num_anchors: usize,
    pub num_vectors: usize,
    pub metric: Metric,
    pub codec: CodecKind,
    pub refine: Option<CodecKind>,
    pub file_size: u64,
    /// How the anchors are stored.
    pub anchor_precision: AnchorPrecision,
    /// (tag, offset, length) of each section.
    pub sections: Vec<(String, u64, u64)>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn corrupt(what: impl Into<String>, offset: u64) -> VlcError {
    VlcError::Corrupt {
        what: what.into(),
        offset,
    }
}

/// Each section's tag and byte range in the file: (tag, start, end).
type SectionRanges = Vec<([u8; 4], usize, usize)>;

/// Check header, table and every section checksum of `bytes`; returns the header facts and the
/// byte range of each section by tag.
fn parse(bytes: &[u8]) -> Result<(FileInfo, SectionRanges)> {
    let file_len = bytes.len() as u64;
    if bytes.len() < 8 {
        let mut found = [0u8; 8];
        found[..bytes.len()].copy_from_slice(bytes);
        if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
            return Err(VlcError::Truncated {
                what: "header".into(),
                needed_end: HEADER_SIZE as u64,
                file_len,
            });
        }
        return Err(VlcError::NotAnIndex { found });
    }
    if bytes[..8] != MAGIC {
        return Err(VlcError::NotAnIndex {
            found: bytes[..8].try_into().unwrap(),
        });
    }
    if bytes.len() < HEADER_SIZE {
        return Err(VlcError::Truncated {
            what: "header".into(),
            needed_end: HEADER_SIZE as u64,
            file_len,
        });
    }
    let h = &bytes[..HEADER_SIZE];
    let stored = u32_at(h, 60);
    let computed = crc32fast::hash(&h[..60]);
    let version = u32_at(h, 8);
    if stored != computed {
        // A newer writer may lay the header out differently: report the version if it is newer.
        if version > FORMAT_VERSION {
            return Err(VlcError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        return Err(VlcError::ChecksumMismatch {
            section: "header".into(),
            offset: 0,
            stored,
            computed,
        });
    }
    if version > FORMAT_VERSION {
        return Err(VlcError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if version == 0 {
        return Err(corrupt("format version 0", 8));
    }
    if u32_at(h, 12) as usize != HEADER_SIZE {
        return Err(corrupt(
            format!("header size {} (expected {HEADER_SIZE})", u32_at(h, 12)),
            12,
        ));
    }
    let dim = u32_at(h, 16) as usize;
    let num_anchors = u32_at(h, 20) as usize;
    let num_vectors = u64_at(h, 24);
    let metric =
        Metric::from_u8(h[32]).ok_or_else(|| corrupt(format!("unknown metric {}", h[32]), 32))?;
    let codec =
        CodecKind::from_u8(h[33]).ok_or_else(|| corrupt(format!("unknown codec {}", h[33]), 33))?;
    let refine = match h[34] {
        NO_REFINE => None,
        v => Some(
            CodecKind::from_u8(v)
                .ok_or_else(|| corrupt(format!("unknown refine codec {v}"), 34))?,
        ),
    };
    for (kind, at) in std::iter::once((codec, 33)).chain(refine.map(|r| (r, 34))) {
        if kind.rabitq_bits().is_some_and(|b| b > 4) && version < 7 {
            return Err(corrupt(
                format!("codec {kind} in a version {version} file (it needs version 7)"),
                at,
            ));
        }
    }
    let anchor_precision = match (h[35], version) {
        (0, _) => AnchorPrecision::F32,
        (FLAG_F16_ANCHORS, _) => AnchorPrecision::F16,
        (FLAG_INT8_ANCHORS, 2..) => AnchorPrecision::Int8,
        (FLAG_INT4_ANCHORS, 3..) => AnchorPrecision::Int4,
        (flags, _) => {
            return Err(corrupt(
                format!("unknown flags {flags:#04x} for format version {version}"),
                35,
            ))
        }
    };
    let count = u32_at(h, 36) as usize;
    if count > MAX_SECTIONS {
        return Err(corrupt(
            format!("{count} sections (at most {MAX_SECTIONS})"),
            36,
        ));
    }
    let file_size = u64_at(h, 40);
    if file_size > file_len {
        return Err(VlcError::Truncated {
            what: "file (header records its size)".into(),
            needed_end: file_size,
            file_len,
        });
    }
    if file_size < file_len {
        return Err(corrupt(
            format!(
                "{} bytes after the recorded end of the index",
                file_len - file_size
            ),
            file_size,
        ));
    }
    if dim == 0 || num_anchors == 0 || num_vectors == 0 || num_vectors > u32::MAX as u64 + 1 {
        return Err(corrupt(
            format!("implausible counts: dim {dim}, anchors {num_anchors}, vectors {num_vectors}"),
            16,
        ));
    }
    let table_end = HEADER_SIZE + count * ENTRY_SIZE;
    if table_end > bytes.len() {
        return Err(VlcError::Truncated {
            what: "section table".into(),
            needed_end: table_end as u64,
            file_len,
        });
    }
    let table = &bytes[HEADER_SIZE..table_end];
    let (stored, computed) = (u32_at(h, 48), crc32fast::hash(table));
    if stored != computed {
        return Err(VlcError::ChecksumMismatch {
            section: "section table".into(),
            offset: HEADER_SIZE as u64,
            stored,
            computed,
        });
    }
    let mut ranges = Vec::with_capacity(count);
    let mut infos = Vec::with_capacity(count);
    for (i, e) in table.chunks_exact(ENTRY_SIZE).enumerate() {
        let at = (HEADER_SIZE + i * ENTRY_SIZE) as u64;
        let tag: [u8; 4] = e[..4].try_into().unwrap();
        let name = String::from_utf8_lossy(&tag).into_owned();
        let (offset, length, crc) = (u64_at(e, 8), u64_at(e, 16), u32_at(e, 24));
        if offset % ALIGN != 0 || offset < table_end as u64 {
            return Err(corrupt(
                format!("section `{name}` offset {offset} is misaligned or overlaps the table"),
                at,
            ));
        }
        let end = offset
            .checked_add(length)
            .ok_or_else(|| corrupt(format!("section `{name}` length overflows"), at))?;
        if end > file_len {
            return Err(VlcError::Truncated {
                what: format!("section `{name}`"),
                needed_end: end,
                file_len,
            });
        }
        let body = &bytes[offset as usize..end as usize];
        let computed = crc32fast::hash(body);
        if computed != crc {
            return Err(VlcError::ChecksumMismatch {
                section: name,
                offset,
                stored: crc,
                computed,
            });
        }
        infos.push((name, offset, length));
        ranges.push((tag, offset as usize, end as usize));
    }
    let info = FileInfo {
        version,
        dim,
        num_anchors,
        num_vectors: num_vectors as usize,
        metric,
        codec,
        refine,
        file_size,
        anchor_precision,
        sections: infos,
    };
    Ok((info, ranges))
}

/// Read and validate only the header and section table of a file (for `vlc info`).
pub fn inspect(path: &Path) -> Result<FileInfo> {
    let (_, map) = open_map(path)?;
    Ok(parse(&map)?.0)
}

fn open_map(path: &Path) -> Result<(std::fs::File, Mmap)> {
    let file = std::fs::File::open(path).map_err(|e| VlcError::io(path, e))?;
    let meta = file.metadata().map_err(|e| VlcError::io(path, e))?;
    if meta.is_dir() {
        return Err(VlcError::io(
            path,
            std::io::Error::other("is a directory, not an index file"),
        ));
    }
    if meta.len() == 0 {
        return Err(VlcError::Truncated {
            what: "header".into(),
            needed_end: HEADER_SIZE as u64,
            file_len: 0,
        });
    }
    // SAFETY: the map is read-only; VLC never writes index files in place (saves go through a
    // temporary file and a rename), so the mapped bytes only change if another program
    // modifies the file, which the documentation of `Index::view` warns against.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| VlcError::io(path, e))?;
    Ok((file, map))
}

/// Build an index from validated bytes; `make` turns a byte range into a section.
fn assemble(
    bytes: &[u8],
    mut make_u64: impl FnMut(usize, usize) -> Result<Section<u64>>,
    mut make_u32: impl FnMut(usize, usize) -> Result<Section<u32>>,
    mut make_u8: impl FnMut(usize, usize) -> Result<Section<u8>>,
) -> Result<Index> {
    let (info, ranges) = parse(bytes)?;
    let find = |tag: &[u8; 4]| ranges.iter().find(|r| &r.0 == tag).map(|r| (r.1, r.2));
    let need = |tag: &[u8; 4], expected: Option<u64>| -> Result<(usize, usize)> {
        let name = String::from_utf8_lossy(tag).into_owned();
        let (lo, hi) = find(tag)
            .ok_or_else(|| corrupt(format!("missing section `{name}`"), HEADER_SIZE as u64))?;
        if let Some(e) = expected {
            if (hi - lo) as u64 != e {
                return Err(corrupt(
                    format!("section `{name}` has {} bytes, header implies {e}", hi - lo),
                    lo as u64,
                ));
            }
        }
        Ok((lo, hi))
    };
    let (k, n) = (info.num_anchors as u64, info.num_vectors as u64);
    let mul = |a: u64, b: u64| {
        a.checked_mul(b)
            .ok_or_else(|| corrupt("sizes overflow", 16))
    };
    let anchor_bytes = info
        .anchor_precision
        .section_bytes(info.num_anchors, info.dim)
        .ok_or_else(|| corrupt("sizes overflow", 16))?;
    let centre = match find(b"CNTR") {
        None => None,
        Some((lo, _)) if info.version < 9 => {
            return Err(corrupt(
                format!(
                    "section `CNTR` in a version {} file (it needs version 9)",
                    info.version
                ),
                lo as u64,
            ))
        }
        Some(_) => {
            let (lo, hi) = need(b"CNTR", Some(mul(info.dim as u64, 4)?))?;
            let centre: Vec<f32> = cast_owned(&bytes[lo..hi]);
            if let Some(i) = centre.iter().position(|v| !v.is_finite()) {
                return Err(corrupt(
                    format!("the centre has a non-finite value at dimension {i}"),
                    lo as u64,
                ));
            }
            Some(centre)
        }
    };
    let anchors_r = need(b"ANCH", Some(anchor_bytes as u64))?;
    let loff_r = need(b"LOFF", Some(mul(k + 1, 8)?))?;
    // Version 10 on: `IDSP` or `IDEF`, not both.
    let per_list_ids = match (find(b"IDEF"), find(b"IDSP")) {
        (Some((lo, _)), Some(_)) => {
            return Err(corrupt("both id sections, `IDEF` and `IDSP`", lo as u64))
        }
        (Some(_), None) => true,
        _ => false,
    };
    let ids_r = if per_list_ids {
        need(b"IDEF", None)?
    } else if info.version >= 3 {
        need(b"IDSP", None)?
    } else {
        need(b"IDS_", Some(mul(n, 4)?))?
    };
    let cpar_r = need(b"CPAR", None)?;
    let codec = Codec::read_params_of_version(
        info.codec,
        info.dim,
        info.num_anchors,
        info.version,
        &bytes[cpar_r.0..cpar_r.1],
    )?;
    let code_r = need(b"CODE", Some(mul(n, codec.code_size() as u64)?))?;
    let refine = match info.refine {
        Some(kind) => {
            let rpar = need(b"RPAR", None)?;
            let c = Codec::read_params_of_version(
                kind,
                info.dim,
                info.num_anchors,
                info.version,
                &bytes[rpar.0..rpar.1],
            )?;
            let rcod = need(b"RCOD", Some(mul(n, c.code_size() as u64)?))?;
            Some((c, make_u8(rcod.0, rcod.1)?))
        }
        None => None,
    };
    let report: BuildReport = match find(b"META") {
        Some((lo, hi)) => serde_json::from_slice(&bytes[lo..hi])
            .map_err(|e| corrupt(format!("META section: {e}"), lo as u64))?,
        None => BuildReport::default(),
    };
    let stored_anchors = StoredAnchors {
        precision: info.anchor_precision,
        bytes: bytes[anchors_r.0..anchors_r.1].to_vec(),
    };
    let anchors = stored_anchors.decode(info.dim);
    if let Some(p) = anchors.iter().position(|v| !v.is_finite()) {
        return Err(corrupt(
            format!("anchor {} has a non-finite value", p / info.dim),
            anchors_r.0 as u64,
        ));
    }
    let list_offsets = make_u64(loff_r.0, loff_r.1)?;
    if list_offsets[0] != 0
        || list_offsets[info.num_anchors] != n
        || list_offsets.windows(2).any(|w| w[0] > w[1])
    {
        return Err(corrupt(
            "list offsets are not increasing from 0 to the vector count",
            loff_r.0 as u64,
        ));
    }
    if per_list_ids && info.version < 10 {
        return Err(corrupt(
            format!(
                "section `IDEF` in a version {} file (it needs version 10)",
                info.version
            ),
            ids_r.0 as u64,
        ));
    }
    let ids = if info.version >= 3 {
        if (ids_r.1 - ids_r.0) % 8 != 0 {
            return Err(corrupt(
                "the id section is not whole 8-byte words",
                ids_r.0 as u64,
            ));
        }
        let words = make_u64(ids_r.0, ids_r.1)?;
        if per_list_ids {
            Ids::PerList(ListIds::from_section(words, &list_offsets, ids_r.0 as u64)?)
        } else {
            Ids::from_packed_section(words, n as usize, ids_r.0 as u64)?
        }
    } else {
        Ids::Plain(make_u32(ids_r.0, ids_r.1)?)
    };
    let codes = make_u8(code_r.0, code_r.1)?;
    Ok(Index::from_parts(
        info.dim,
        info.metric,
        centre,
        info.num_vectors,
        stored_anchors,
        list_offsets,
        ids,
        codec,
        codes,
        refine,
        report,
        true,
    ))
}

/// `bytes` copied into a new buffer, marked for huge pages before the copy touches it
/// ([`crate::pages`]).
fn cast_owned<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
    crate::pages::advise_huge_pages(&v);
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    v
}

impl Index {
    /// Write the index to `path` atomically (temporary file, fsync, rename): an existing good
    /// file is only ever replaced by a complete one.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomic_with(path.as_ref(), &mut |out| write_index(self, out).map(|_| ()))
    }

    /// Read an index into memory, verifying every checksum.
    pub fn load(path: impl AsRef<Path>) -> Result<Index> {
        let (_, map) = open_map(path.as_ref())?;
        Self::from_bytes(&map)
    }

    /// Parse an index from bytes (copied), verifying every checksum.
    pub fn from_bytes(bytes: &[u8]) -> Result<Index> {
        assemble(
            bytes,
            |a, b| Ok(Section::Owned(cast_owned(&bytes[a..b]))),
            |a, b| Ok(Section::Owned(cast_owned(&bytes[a..b]))),
            |a, b| Ok(Section::Owned(cast_owned(&bytes[a..b]))),
        )
    }

    /// Open an index as a read-only memory map: anchors, ids and codes are used in place
    /// (zero-copy), so opening costs one checksum pass and no copies. The file must not be
    /// modified by other programs while the index is open.
    pub fn view(path: impl AsRef<Path>) -> Result<Index> {
        let (_, map) = open_map(path.as_ref())?;
        let map = Arc::new(map);
        fn mapped<T: bytemuck::Pod>(map: &Arc<Mmap>, a: usize, b: usize) -> Result<Section<T>> {
            bytemuck::try_cast_slice::<u8, T>(&map[a..b])
                .map_err(|e| corrupt(format!("section cannot be mapped: {e:?}"), a as u64))?;
            Ok(Section::Mapped {
                map: map.clone(),
                offset: a,
                len: (b - a) / std::mem::size_of::<T>(),
            })
        }
        let bytes: &[u8] = &map;
        assemble(
            bytes,
            |a, b| mapped(&map, a, b),
            |a, b| mapped(&map, a, b),
            |a, b| mapped(&map, a, b),
        )
    }
}
