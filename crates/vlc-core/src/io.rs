//! Reading vectors and ground truth: `.npy` (f32, f16, i32, i64; C order), `.fvecs`, `.bvecs`,
//! `.ivecs`, and raw little-endian f32 with a given dimension.

use crate::error::{Result, VlcError};
use std::path::Path;

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
    F16,
    I32,
    I64,
    U8,
}

impl NpyType {
    fn size(self) -> usize {
        match self {
            NpyType::F32 | NpyType::I32 => 4,
            NpyType::F16 => 2,
            NpyType::I64 => 8,
            NpyType::U8 => 1,
        }
    }
    fn descr(self) -> &'static str {
        match self {
            NpyType::F32 => "<f4",
            NpyType::F16 => "<f2",
            NpyType::I32 => "<i4",
            NpyType::I64 => "<i8",
            NpyType::U8 => "|u1",
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
        NpyType::F16,
        NpyType::I32,
        NpyType::I64,
        NpyType::U8,
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
            format!("unsupported dtype {shown} (supported: <f4, <f2, <i4, <i8, u1; little-endian)"),
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
    if need != bytes.len() {
        return Err(malformed(
            path,
            "npy",
            format!(
                "shape {shape:?} of {} needs {need} bytes, file has {}",
                ty.descr(),
                bytes.len()
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

/// Read a 2-d `.npy` of f32 or f16 (widened to f32) vectors.
pub fn read_npy_f32(path: &Path) -> Result<Matrix<f32>> {
    decode_npy_f32(path, &read_all(path)?)
}

/// Decode `.npy` bytes of f32, f16 or u8 vectors; `path` only names the source in errors.
pub fn decode_npy_f32(path: &Path, bytes: &[u8]) -> Result<Matrix<f32>> {
    let (ty, shape, off) = parse_npy_header(path, bytes)?;
    let (rows, cols) = shape_2d(path, &shape)?;
    let body = &bytes[off..];
    let data: Vec<f32> = match ty {
        NpyType::F32 => body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        NpyType::F16 => body
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        NpyType::U8 => body.iter().map(|&b| b as f32).collect(),
        t => {
            return Err(malformed(
                path,
                "npy",
                format!("expected float vectors, got {}", t.descr()),
            ))
        }
    };
    Ok(Matrix { rows, cols, data })
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
        t => {
            return Err(malformed(
                path,
                "npy",
                format!("expected integer ids (<i4 or <i8), got {}", t.descr()),
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

/// Read `*vecs` files: records of an i32 dimension followed by that many elements of `elem`
/// bytes, all records the same dimension.
fn read_vecs<T>(
    path: &Path,
    kind: &'static str,
    elem: usize,
    conv: impl Fn(&[u8]) -> T,
) -> Result<Matrix<T>> {
    let bytes = read_all(path)?;
    if bytes.is_empty() {
        return Err(VlcError::EmptyInput {
            what: path.display().to_string(),
        });
    }
    if bytes.len() < 4 {
        return Err(malformed(path, kind, "shorter than one record header"));
    }
    let d = i32::from_le_bytes(bytes[..4].try_into().unwrap());
    if d <= 0 {
        return Err(malformed(path, kind, format!("record 0 has dimension {d}")));
    }
    let d = d as usize;
    let rec = 4 + d * elem;
    if bytes.len() % rec != 0 {
        return Err(malformed(
            path,
            kind,
            format!(
                "file length {} is not a multiple of the record size {rec} (dimension {d})",
                bytes.len()
            ),
        ));
    }
    let rows = bytes.len() / rec;
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
    let format = VectorFormat::from_path(path).ok_or_else(|| VlcError::UnsupportedFormat {
        path: path.to_path_buf(),
        reason: "unknown extension (expected .npy, .fvecs, .bvecs, or .f32/.bin/.raw with --dim)"
            .into(),
    })?;
    let m = match format {
        VectorFormat::Npy => read_npy_f32(path)?,
        VectorFormat::Fvecs => read_vecs(path, "fvecs", 4, |c| {
            f32::from_le_bytes(c.try_into().unwrap())
        })?,
        VectorFormat::Bvecs => read_vecs(path, "bvecs", 1, |c| c[0] as f32)?,
        VectorFormat::RawF32 => {
            let d = dim.ok_or_else(|| {
                VlcError::param("dim", format!("raw file {} needs --dim", path.display()))
            })?;
            if d == 0 {
                return Err(VlcError::param("dim", "must be at least 1"));
            }
            let bytes = read_all(path)?;
            if bytes.len() % (4 * d) != 0 {
                return Err(malformed(
                    path,
                    "raw f32",
                    format!(
                        "length {} is not a multiple of 4 × dim ({})",
                        bytes.len(),
                        4 * d
                    ),
                ));
            }
            let data = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>();
            Matrix {
                rows: data.len() / d,
                cols: d,
                data,
            }
        }
    };
    if let Some(d) = dim {
        if d != m.cols {
            return Err(VlcError::DimensionMismatch {
                what: path.display().to_string(),
                expected: d,
                actual: m.cols,
            });
        }
    }
    if m.rows == 0 || m.cols == 0 {
        return Err(VlcError::EmptyInput {
            what: path.display().to_string(),
        });
    }
    crate::vectors::validate_vectors(&m.data, m.cols, &path.display().to_string())?;
    Ok(m)
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
                reason: "ground truth must be .npy (int32/int64) or .ivecs".into(),
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
