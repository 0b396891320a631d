//! Reading vectors and ground truth: `.npy` (f32, f64, f16, u8, i32, i64; C order), `.fvecs`, `.bvecs`,
//! `.ivecs`, and raw little-endian f32 with a given dimension.

use crate::error::{Result, VlcError};
use crate::vectors::VectorSource;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A dense matrix read from a file. Layout of `data`: (rows, cols), row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix<T> {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<T>,
}

impl<T> Matrix<T> {
    pub fn row(&self, i: usize) -> &[T] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// Element type of a `.npy` array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpyType {
    F32,
    /// NumPy's default float; vectors are narrowed to f32 as they are read.
    F64,
    F16,
    I32,
    I64,
    U8,
    /// Unsigned ids (NumPy's `uint32`); read as ids only.
    U32,
    /// Unsigned ids (NumPy's `uint64`); read as ids only, each at most `i64::MAX`.
    U64,
}

impl NpyType {
    fn size(self) -> usize {
        match self {
            NpyType::F32 | NpyType::I32 | NpyType::U32 => 4,
            NpyType::F16 => 2,
            NpyType::F64 | NpyType::I64 | NpyType::U64 => 8,
            NpyType::U8 => 1,
        }
    }
    fn descr(self) -> &'static str {
        match self {
            NpyType::F32 => "<f4",
            NpyType::F64 => "<f8",
            NpyType::F16 => "<f2",
            NpyType::I32 => "<i4",
            NpyType::I64 => "<i8",
            NpyType::U8 => "|u1",
            NpyType::U32 => "<u4",
            NpyType::U64 => "<u8",
        }
    }
}

fn read_all(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| VlcError::io(path, e))
}

fn malformed(path: &Path, kind: &'static str, reason: impl Into<String>) -> VlcError {
    VlcError::MalformedInput {
        path: path.to_path_buf(),
        kind,
        reason: reason.into(),
    }
}

/// Parse a `.npy` header; returns (type, shape, data offset).
pub fn parse_npy_header(path: &Path, bytes: &[u8]) -> Result<(NpyType, Vec<usize>, usize)> {
    parse_npy_header_of(path, bytes, bytes.len())
}

/// Bytes of a `.npy` file from its start through its header, given the first 12 (or all, if
/// fewer): the header's own length field says how far it runs. Where the magic or version is
/// wrong, 12 (the parser then names the problem).
fn npy_header_end(first: &[u8]) -> usize {
    match first.get(6) {
        Some(1) if first.len() >= 10 => 10 + u16::from_le_bytes([first[8], first[9]]) as usize,
        Some(2 | 3) if first.len() >= 12 => {
            12 + u32::from_le_bytes(first[8..12].try_into().unwrap()) as usize
        }
        _ => 12,
    }
}

/// [`parse_npy_header`] given the file's first bytes (through its header at least, where the
/// file is that long) and its whole length.
fn parse_npy_header_of(
    path: &Path,
    bytes: &[u8],
    file_len: usize,
) -> Result<(NpyType, Vec<usize>, usize)> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(malformed(path, "npy", "missing the \\x93NUMPY magic"));
    }
    let major = bytes[6];
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(malformed(path, "npy", "truncated header"));
            }
            (
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
                12,
            )
        }
        v => {
            return Err(malformed(
                path,
                "npy",
                format!("unsupported npy version {v}"),
            ))
        }
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| malformed(path, "npy", "header runs past the end of the file"))?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| malformed(path, "npy", "header is not text"))?;
    let field = |key: &str| -> Result<&str> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| malformed(path, "npy", format!("header lacks '{key}'")))?;
        let rest = &header[at + key.len() + 2..];
        let colon = rest
            .find(':')
            .ok_or_else(|| malformed(path, "npy", "bad header"))?;
        Ok(rest[colon + 1..].trim_start())
    };
    let descr = field("descr")?;
    let ty = [
        NpyType::F32,
        NpyType::F64,
        NpyType::F16,
        NpyType::I32,
        NpyType::I64,
        NpyType::U8,
        NpyType::U32,
        NpyType::U64,
    ]
    .into_iter()
    .find(|t| {
        descr.starts_with(&format!("'{}'", t.descr()))
            || (t.size() == 1 && descr.starts_with("'<u1'"))
    })
    .ok_or_else(|| {
        let shown: String = descr.chars().take_while(|c| *c != ',').collect();
        malformed(
            path,
            "npy",
            format!(
                "unsupported dtype {shown} (supported, little-endian: <f4, <f8, <f2 or u1 for vectors; <i4, <i8, <u4 or <u8 for ids)"
            ),
        )
    })?;
    if field("fortran_order")?.starts_with("True") {
        return Err(malformed(
            path,
            "npy",
            "Fortran-order arrays are not supported; save with C order",
        ));
    }
    let shape_text = field("shape")?;
    let close = shape_text
        .find(')')
        .ok_or_else(|| malformed(path, "npy", "bad shape"))?;
    let shape: Vec<usize> = shape_text[1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| malformed(path, "npy", format!("bad shape entry `{s}`")))
        })
        .collect::<Result<_>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| malformed(path, "npy", "shape overflows"))?;
    let need = count
        .checked_mul(ty.size())
        .and_then(|b| b.checked_add(end))
        .ok_or_else(|| malformed(path, "npy", "shape overflows"))?;
    if need != file_len {
        return Err(malformed(
            path,
            "npy",
            format!(
                "shape {shape:?} of {} needs {need} bytes, file has {file_len}",
                ty.descr(),
            ),
        ));
    }
    Ok((ty, shape, end))
}

fn shape_2d(path: &Path, shape: &[usize]) -> Result<(usize, usize)> {
    match shape {
        [n, d] => Ok((*n, *d)),
        [d] => Ok((1, *d)),
        s => Err(malformed(
            path,
            "npy",
            format!("expected a 2-d array, got shape {s:?}"),
        )),
    }
}

/// Read a 2-d `.npy` of f32, f64 (narrowed), f16 or u8 (widened) vectors, as f32.
pub fn read_npy_f32(path: &Path) -> Result<Matrix<f32>> {
    decode_npy_f32(path, &read_all(path)?)
}

/// Decode `.npy` bytes of f32, f64, f16 or u8 vectors; `path` only names the source in errors.
pub fn decode_npy_f32(path: &Path, bytes: &[u8]) -> Result<Matrix<f32>> {
    let (ty, shape, off) = parse_npy_header(path, bytes)?;
    let (rows, cols) = shape_2d(path, &shape)?;
    let elem = Elem::of_npy(path, ty)?;
    let mut data = vec![0f32; rows * cols];
    elem.convert(&bytes[off..], &mut data);
    Ok(Matrix { rows, cols, data })
}

/// The element type of a vector file's values, as stored (little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    F32,
    F64,
    F16,
    U8,
}

impl Elem {
    fn of_npy(path: &Path, ty: NpyType) -> Result<Self> {
        match ty {
            NpyType::F32 => Ok(Elem::F32),
            NpyType::F64 => Ok(Elem::F64),
            NpyType::F16 => Ok(Elem::F16),
            NpyType::U8 => Ok(Elem::U8),
            t => Err(malformed(
                path,
                "npy",
                format!(
                    "expected vectors of <f4, <f8, <f2 or u1, got {} (integer arrays are read as ids: ground truth, --ids-file)",
                    t.descr()
                ),
            )),
        }
    }
    fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F64 => 8,
            Elem::F16 => 2,
            Elem::U8 => 1,
        }
    }
    /// Convert `bytes` (out.len() values of this type) into `out`. f64 is rounded to the
    /// nearest f32; a value beyond f32's range becomes infinite, which the readers' finiteness
    /// check then reports with its row and column.
    fn convert(self, bytes: &[u8], out: &mut [f32]) {
        match self {
            Elem::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes(c.try_into().unwrap());
                }
            }
            Elem::F64 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                    *o = f64::from_le_bytes(c.try_into().unwrap()) as f32;
                }
            }
            Elem::F16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            Elem::U8 => {
                for (o, &b) in out.iter_mut().zip(bytes) {
                    *o = b as f32;
                }
            }
        }
    }
}

/// Read a 2-d `.npy` of i32 or i64 ids (e.g. ground truth).
pub fn read_npy_ids(path: &Path) -> Result<Matrix<i64>> {
    let bytes = read_all(path)?;
    let (ty, shape, off) = parse_npy_header(path, &bytes)?;
    let (rows, cols) = shape_2d(path, &shape)?;
    let body = &bytes[off..];
    let data = match ty {
        NpyType::I32 => body
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
            .collect(),
        NpyType::I64 => body
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        NpyType::U32 => body
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64)
            .collect(),
        NpyType::U64 => body
            .chunks_exact(8)
            .map(|c| {
                let v = u64::from_le_bytes(c.try_into().unwrap());
                i64::try_from(v).map_err(|_| {
                    malformed(
                        path,
                        "npy",
                        format!("id {v} is out of range (at most 2^63 - 1)"),
                    )
                })
            })
            .collect::<Result<_>>()?,
        t => {
            return Err(malformed(
                path,
                "npy",
                format!(
                    "expected integer ids (<i4, <i8, <u4 or <u8), got {}",
                    t.descr()
                ),
            ))
        }
    };
    Ok(Matrix { rows, cols, data })
}

/// Write a 2-d `.npy` (f32 or i64), the bytes given already little-endian.
pub fn npy_bytes(ty: NpyType, rows: usize, cols: usize, body: &[u8]) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}",
        ty.descr()
    );
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend_from_slice(body);
    out
}

/// The shape of a `*vecs` file from its length and first 4 bytes (`head`, fewer when the file
/// is shorter): (rows, dimension, record size in bytes). Every record must have the first
/// one's dimension; readers check that as they read each record.
fn vecs_shape(
    path: &Path,
    kind: &'static str,
    elem: usize,
    len: usize,
    head: &[u8],
) -> Result<(usize, usize, usize)> {
    if len == 0 {
        return Err(VlcError::EmptyInput {
            what: path.display().to_string(),
        });
    }
    let Ok(first) = <[u8; 4]>::try_from(head) else {
        return Err(malformed(path, kind, "shorter than one record header"));
    };
    let d = i32::from_le_bytes(first);
    if d <= 0 {
        return Err(malformed(path, kind, format!("record 0 has dimension {d}")));
    }
    let d = d as usize;
    let record = 4 + d * elem;
    if !len.is_multiple_of(record) {
        return Err(malformed(
            path,
            kind,
            format!(
                "file length {len} is not a multiple of the record size {record} (dimension {d})"
            ),
        ));
    }
    Ok((len / record, d, record))
}

/// Read `*vecs` files: records of an i32 dimension followed by that many elements of `elem`
/// bytes, all records the same dimension.
fn read_vecs<T>(
    path: &Path,
    kind: &'static str,
    elem: usize,
    conv: impl Fn(&[u8]) -> T,
) -> Result<Matrix<T>> {
    let bytes = read_all(path)?;
    let (rows, d, rec) = vecs_shape(path, kind, elem, bytes.len(), &bytes[..bytes.len().min(4)])?;
    let mut data = Vec::with_capacity(rows * d);
    for (r, chunk) in bytes.chunks_exact(rec).enumerate() {
        let rd = i32::from_le_bytes(chunk[..4].try_into().unwrap());
        if rd as usize != d {
            return Err(malformed(
                path,
                kind,
                format!("record {r} has dimension {rd}, record 0 has {d}"),
            ));
        }
        data.extend(chunk[4..].chunks_exact(elem).map(&conv));
    }
    Ok(Matrix {
        rows,
        cols: d,
        data,
    })
}

/// How to interpret an input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorFormat {
    Npy,
    Fvecs,
    Bvecs,
    /// Raw little-endian f32; needs the dimension.
    RawF32,
}

impl VectorFormat {
    /// Guess from the extension: .npy, .fvecs, .bvecs; .f32/.bin/.raw/.fbin are raw f32.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "npy" => Some(VectorFormat::Npy),
            "fvecs" => Some(VectorFormat::Fvecs),
            "bvecs" => Some(VectorFormat::Bvecs),
            "f32" | "bin" | "raw" => Some(VectorFormat::RawF32),
            _ => None,
        }
    }
}

/// Read vectors as f32 from `path`; `dim` is required for raw files and, when given for the
/// other formats, checked. The result is validated (non-empty, finite).
pub fn read_vectors(path: &Path, dim: Option<usize>) -> Result<Matrix<f32>> {
    let file = VectorFile::open(path, dim)?;
    let mut data = vec![0f32; file.rows * file.cols];
    file.read_rows(0, &mut data)?;
    crate::vectors::validate_vectors(&data, file.cols, &path.display().to_string())?;
    Ok(Matrix {
        rows: file.rows,
        cols: file.cols,
        data,
    })
}

/// A file of vectors (`.npy` of f32, f16 or u8; `.fvecs`; `.bvecs`; raw f32), read as a
/// [`VectorSource`]: rows are read from the file and widened to f32 only when asked for, so
/// [`crate::Index::build_from`] never holds the whole input in memory. The file is opened and
/// its header checked once; a `*vecs` record whose dimension differs from the first record's
/// is reported when it is read.
pub struct VectorFile {
    path: PathBuf,
    file: File,
    elem: Elem,
    /// Byte offset of row 0's record (its values, or for `*vecs` its dimension and values).
    first_record: u64,
    /// Bytes from one row's record to the next row's.
    stride: usize,
    /// `*vecs` records: each row's values follow its dimension as a 4-byte integer.
    record_dims: bool,
    rows: usize,
    cols: usize,
}

impl VectorFile {
    /// Open `path`, of the format its extension names (see [`VectorFormat`]). `dim` is required
    /// for raw files and, when given for the other formats, checked.
    pub fn open(path: &Path, dim: Option<usize>) -> Result<Self> {
        let format = VectorFormat::from_path(path).ok_or_else(|| VlcError::UnsupportedFormat {
            path: path.to_path_buf(),
            reason:
                "unknown extension (expected .npy, .fvecs, .bvecs, or .f32/.bin/.raw with --dim)"
                    .into(),
        })?;
        let file = File::open(path).map_err(|e| VlcError::io(path, e))?;
        let len = file.metadata().map_err(|e| VlcError::io(path, e))?.len() as usize;
        let mut vf = VectorFile {
            path: path.to_path_buf(),
            file,
            elem: Elem::F32,
            first_record: 0,
            stride: 0,
            record_dims: false,
            rows: 0,
            cols: 0,
        };
        let head = |vf: &VectorFile, n: usize| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; n.min(len)];
            vf.read_at(&mut buf, 0)?;
            Ok(buf)
        };
        match format {
            VectorFormat::Npy => {
                let first = head(&vf, 12)?;
                let bytes = head(&vf, npy_header_end(&first))?;
                let (ty, shape, off) = parse_npy_header_of(path, &bytes, len)?;
                let (rows, cols) = shape_2d(path, &shape)?;
                vf.elem = Elem::of_npy(path, ty)?;
                vf.first_record = off as u64;
                (vf.rows, vf.cols) = (rows, cols);
                vf.stride = cols * vf.elem.size();
            }
            VectorFormat::Fvecs | VectorFormat::Bvecs => {
                let (kind, elem) = if format == VectorFormat::Fvecs {
                    ("fvecs", Elem::F32)
                } else {
                    ("bvecs", Elem::U8)
                };
                let first = head(&vf, 4)?;
                let (rows, d, record) = vecs_shape(path, kind, elem.size(), len, &first)?;
                vf.elem = elem;
                vf.stride = record;
                vf.record_dims = true;
                (vf.rows, vf.cols) = (rows, d);
            }
            VectorFormat::RawF32 => {
                let d = dim.ok_or_else(|| {
                    VlcError::param("dim", format!("raw file {} needs --dim", path.display()))
                })?;
                if d == 0 {
                    return Err(VlcError::param("dim", "must be at least 1"));
                }
                if !len.is_multiple_of(4 * d) {
                    return Err(malformed(
                        path,
                        "raw f32",
                        format!("length {len} is not a multiple of 4 × dim ({})", 4 * d),
                    ));
                }
                vf.stride = 4 * d;
                (vf.rows, vf.cols) = (len / (4 * d), d);
            }
        }
        if let Some(d) = dim {
            if d != vf.cols {
                return Err(VlcError::DimensionMismatch {
                    what: path.display().to_string(),
                    expected: d,
                    actual: vf.cols,
                });
            }
        }
        if vf.rows == 0 || vf.cols == 0 {
            return Err(VlcError::EmptyInput {
                what: path.display().to_string(),
            });
        }
        Ok(vf)
    }

    /// Number of vectors in the file.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per vector.
    pub fn cols(&self) -> usize {
        self.cols
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file
                .read_exact_at(buf, offset)
                .map_err(|e| VlcError::io(&self.path, e))
        }
        #[cfg(windows)]
        {
            use std::os::windows::fs::FileExt;
            let mut done = 0;
            while done < buf.len() {
                match self.file.seek_read(&mut buf[done..], offset + done as u64) {
                    Ok(0) => {
                        return Err(VlcError::io(
                            &self.path,
                            std::io::ErrorKind::UnexpectedEof.into(),
                        ))
                    }
                    Ok(k) => done += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(VlcError::io(&self.path, e)),
                }
            }
            Ok(())
        }
    }
}

impl VectorSource for VectorFile {
    fn num_rows(&self) -> usize {
        self.rows
    }
    fn dim(&self) -> usize {
        self.cols
    }
    fn read_rows(&self, start: usize, out: &mut [f32]) -> Result<()> {
        // Large reads go through a buffer of about 8 MiB of the file's bytes at a time.
        self.read_rows_in_pieces(start, out, 8 << 20)
    }
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

impl VectorFile {
    /// [`VectorSource::read_rows`], reading at most `piece_bytes` of the file (at least one
    /// row) at a time.
    fn read_rows_in_pieces(&self, start: usize, out: &mut [f32], piece_bytes: usize) -> Result<()> {
        use rayon::prelude::*;
        let count = out.len() / self.cols;
        let piece = (piece_bytes / self.stride).max(1);
        let mut bytes = vec![0u8; piece.min(count) * self.stride];
        for first in (0..count).step_by(piece) {
            let rows = piece.min(count - first);
            let raw = &mut bytes[..rows * self.stride];
            self.read_at(
                raw,
                self.first_record + ((start + first) * self.stride) as u64,
            )?;
            if self.record_dims {
                if let Some(r) = raw.chunks_exact(self.stride).position(|rec| {
                    i32::from_le_bytes(rec[..4].try_into().unwrap()) as usize != self.cols
                }) {
                    let rd = i32::from_le_bytes(raw[r * self.stride..][..4].try_into().unwrap());
                    return Err(malformed(
                        &self.path,
                        if self.elem == Elem::F32 {
                            "fvecs"
                        } else {
                            "bvecs"
                        },
                        format!(
                            "record {} has dimension {rd}, record 0 has {}",
                            start + first + r,
                            self.cols
                        ),
                    ));
                }
            }
            let skip = if self.record_dims { 4 } else { 0 };
            let values = self.cols * self.elem.size();
            out[first * self.cols..(first + rows) * self.cols]
                .par_chunks_mut(self.cols)
                .zip(raw.par_chunks_exact(self.stride))
                .for_each(|(o, rec)| self.elem.convert(&rec[skip..skip + values], o));
        }
        Ok(())
    }
}

/// Read ground-truth neighbour ids: `.npy` (i32/i64) or `.ivecs`.
pub fn read_ids(path: &Path) -> Result<Matrix<i64>> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let m = match ext.as_str() {
        "npy" => read_npy_ids(path)?,
        "ivecs" => read_vecs(path, "ivecs", 4, |c| {
            i32::from_le_bytes(c.try_into().unwrap()) as i64
        })?,
        _ => {
            return Err(VlcError::UnsupportedFormat {
                path: path.to_path_buf(),
                reason: "ground truth must be .npy (int32, int64, uint32 or uint64) or .ivecs"
                    .into(),
            })
        }
    };
    if m.rows == 0 || m.cols == 0 {
        return Err(VlcError::EmptyInput {
            what: path.display().to_string(),
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads that span several pieces, start mid-file or end at the last row give the rows
    /// a whole read gives, for each layout (npy header, `*vecs` records, raw).
    #[test]
    fn reads_in_pieces_match_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, cols) = (37, 5);
        let values: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.25 - 7.0).collect();
        let f32s: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let records: Vec<u8> = f32s
            .chunks(4 * cols)
            .flat_map(|r| {
                (cols as i32)
                    .to_le_bytes()
                    .into_iter()
                    .chain(r.iter().copied())
            })
            .collect();
        let files = [
            ("a.npy", npy_bytes(NpyType::F32, rows, cols, &f32s)),
            ("b.fvecs", records),
            ("c.f32", f32s.clone()),
        ];
        for (name, bytes) in files {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let file = VectorFile::open(&path, Some(cols)).unwrap();
            for (start, count, piece_bytes) in
                [(0, rows, 7), (3, 20, 64), (30, 7, 1), (36, 1, 8 << 20)]
            {
                let mut out = vec![f32::NAN; count * cols];
                file.read_rows_in_pieces(start, &mut out, piece_bytes)
                    .unwrap();
                assert_eq!(
                    out,
                    values[start * cols..(start + count) * cols],
                    "{name} {start} {count} {piece_bytes}"
                );
            }
        }
    }
}
