//! The one error type of the library.

use std::path::PathBuf;

/// Every failure the library reports. Variants carry the structured facts (row, column,
/// offsets, versions) so callers can react without parsing text.
#[derive(Debug, thiserror::Error)]
pub enum VlcError {
    /// The message already names the cause, so it is not also chained as `source()` (error
    /// reports would print it twice).
    #[error("I/O error on {path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("input is empty: {what}")]
    EmptyInput { what: String },
    #[error("non-finite value ({value}) in {what} at row {row}, column {column}")]
    NonFinite {
        what: String,
        row: usize,
        column: usize,
        value: f32,
    },
    /// A row so long that squared distances to it could overflow f32 (see
    /// [`crate::vectors::MAX_SQUARED_LENGTH`]).
    #[error("vector too large in {what} at row {row}: its squared length {squared_length:.3e} exceeds {limit:.3e}, past which squared distances in f32 can overflow; scale the vectors down (e.g. normalise them)")]
    TooLarge {
        what: String,
        row: usize,
        /// The row's squared length, summed in f64.
        squared_length: f64,
        limit: f32,
    },
    /// Build input whose rows lie so close together that squared distances between them fall
    /// below f32's normal range (see [`crate::vectors::MIN_SPREAD`]).
    #[error("vectors too close together in {what}: their spread (mean squared distance to their mean, {spread:.3e} over a sample) is below {limit:.3e}, where squared distances in f32 lose their precision; scale the vectors up (e.g. normalise them)")]
    TooSmall {
        what: String,
        /// The sample's mean squared distance to its mean, summed in f64.
        spread: f64,
        limit: f32,
    },
    /// A row of zero length where the cosine metric must scale every row to unit length.
    #[error("zero vector in {what} at row {row}: the cosine metric needs a direction (remove the row, or use the l2 metric)")]
    ZeroVector { what: String, row: usize },
    #[error("dimension mismatch in {what}: expected {expected}, got {actual}")]
    DimensionMismatch {
        what: String,
        expected: usize,
        actual: usize,
    },
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter { name: &'static str, reason: String },
    #[error("unsupported input format for {path}: {reason}")]
    UnsupportedFormat { path: PathBuf, reason: String },
    #[error("malformed {kind} file {path}: {reason}")]
    MalformedInput {
        path: PathBuf,
        kind: &'static str,
        reason: String,
    },
    #[error("not a VLC index (bad magic bytes {found:?})")]
    NotAnIndex { found: [u8; 8] },
    #[error("index format version {found} is newer than this build supports (up to {supported}); upgrade vlc")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error(
        "index file is truncated: {what} needs bytes {needed_end} but the file has {file_len}"
    )]
    Truncated {
        what: String,
        needed_end: u64,
        file_len: u64,
    },
    #[error("index file is corrupt: {what} (at byte offset {offset})")]
    Corrupt { what: String, offset: u64 },
    #[error("checksum mismatch in section `{section}` at offset {offset}: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        section: String,
        offset: u64,
        stored: u32,
        computed: u32,
    },
    #[error("backend `{backend}` failed: {reason}")]
    Backend { backend: String, reason: String },
}

/// Result alias used across the crate.
pub type Result<T, E = VlcError> = std::result::Result<T, E>;

impl VlcError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        VlcError::Io {
            path: path.into(),
            cause: source,
        }
    }
    /// The error of rows `offset..` read as rows `0..`: its row, where it names one, counted
    /// from the start of the whole input (for a caller that passes a large input a block at a
    /// time).
    pub fn with_row_offset(mut self, offset: usize) -> Self {
        match &mut self {
            VlcError::NonFinite { row, .. }
            | VlcError::TooLarge { row, .. }
            | VlcError::ZeroVector { row, .. } => *row += offset,
            _ => {}
        }
        self
    }

    pub fn param(name: &'static str, reason: impl Into<String>) -> Self {
        VlcError::InvalidParameter {
            name,
            reason: reason.into(),
        }
    }
}
