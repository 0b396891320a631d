//! Validation and normalisation of vector buffers.

use crate::error::{Result, VlcError};
use rayon::prelude::*;

/// Check that `data` is a non-empty (n, dim) row-major buffer of finite values. Errors name
/// the first offending row and column.
pub fn validate_vectors(data: &[f32], dim: usize, what: &str) -> Result<()> {
    check_whole_rows(data, dim, what)?;
    if data.is_empty() {
        return Err(VlcError::EmptyInput {
            what: what.to_string(),
        });
    }
    check_finite(data, dim, 0, what)
}

/// Check that `dim` is at least 1 and `data` a whole number of rows of it.
fn check_whole_rows(data: &[f32], dim: usize, what: &str) -> Result<()> {
    if dim == 0 {
        return Err(VlcError::param("dim", "must be at least 1"));
    }
    if !data.len().is_multiple_of(dim) {
        return Err(VlcError::DimensionMismatch {
            what: format!(
                "{what}: buffer of {} values is not a whole number of rows",
                data.len()
            ),
            expected: dim,
            actual: data.len() % dim,
        });
    }
    Ok(())
}

/// Check that every value of `data` (rows, dim), row-major, is finite; an error names the first
/// offending row (counted from `first_row`, the row number of `data`'s first row) and column.
fn check_finite(data: &[f32], dim: usize, first_row: usize, what: &str) -> Result<()> {
    let bad = data
        .par_chunks(dim)
        .position_first(|row| row.iter().any(|v| !v.is_finite()));
    if let Some(row) = bad {
        let column = data[row * dim..(row + 1) * dim]
            .iter()
            .position(|v| !v.is_finite())
            .unwrap();
        return Err(VlcError::NonFinite {
            what: what.to_string(),
            row: first_row + row,
            column,
            value: data[row * dim + column],
        });
    }
    Ok(())
}

/// A copy of `data` (n, dim) with every row scaled to unit length (zero rows stay zero).
pub fn normalize_rows(data: &[f32], dim: usize) -> Vec<f32> {
    let mut out = data.to_vec();
    normalize_rows_in_place(&mut out, dim);
    out
}

/// Scale every row of `data` (n, dim), row-major, to unit length in place (zero rows stay zero).
pub fn normalize_rows_in_place(data: &mut [f32], dim: usize) {
    data.par_chunks_mut(dim).for_each(|row| {
        let norm = crate::linalg::dot(row, row).sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|v| *v /= norm);
        }
    });
}

/// Input rows that a build reads a block at a time, so that its input need not be held in
/// memory as f32: [`crate::io::VectorFile`] maps a file and converts the rows it is asked
/// for; [`SliceSource`] serves a buffer already in memory.
pub trait VectorSource: Sync {
    /// Number of rows.
    fn num_rows(&self) -> usize;
    /// Values per row.
    fn dim(&self) -> usize;
    /// Copy rows `start .. start + out.len() / dim` into `out`.
    /// Layout of `out`: (rows, dim), row-major; `out.len()` is a multiple of `dim` and the rows
    /// lie within `0 .. num_rows()`.
    fn read_rows(&self, start: usize, out: &mut [f32]) -> Result<()>;
    /// What the rows are, for error messages (a file's path, "input vectors").
    fn describe(&self) -> String;
}

/// A [`VectorSource`] over a buffer in memory. Layout of `data`: (rows, dim), row-major.
pub struct SliceSource<'a> {
    data: &'a [f32],
    dim: usize,
}

impl<'a> SliceSource<'a> {
    /// Errors when `dim` is 0 or `data` is not a whole number of rows.
    pub fn new(data: &'a [f32], dim: usize) -> Result<Self> {
        check_whole_rows(data, dim, "input vectors")?;
        Ok(SliceSource { data, dim })
    }
}

impl VectorSource for SliceSource<'_> {
    fn num_rows(&self) -> usize {
        self.data.len() / self.dim
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn read_rows(&self, start: usize, out: &mut [f32]) -> Result<()> {
        out.copy_from_slice(&self.data[start * self.dim..start * self.dim + out.len()]);
        Ok(())
    }
    fn describe(&self) -> String {
        "input vectors".into()
    }
}

/// The rows a build works on: those of `inner`, checked to be finite as they are read (an
/// error names the row in `inner`'s numbering) and, for the cosine metric, scaled to unit length.
pub(crate) struct PreparedRows<'a> {
    pub inner: &'a dyn VectorSource,
    pub normalize: bool,
}

impl VectorSource for PreparedRows<'_> {
    fn num_rows(&self) -> usize {
        self.inner.num_rows()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn read_rows(&self, start: usize, out: &mut [f32]) -> Result<()> {
        self.inner.read_rows(start, out)?;
        check_finite(out, self.dim(), start, &self.inner.describe())?;
        if self.normalize {
            normalize_rows_in_place(out, self.dim());
        }
        Ok(())
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Rows `indices` of `source`, in that order. Layout: (indices.len(), dim), row-major.
pub fn gather_rows(source: &dyn VectorSource, indices: &[usize]) -> Result<Vec<f32>> {
    let dim = source.dim();
    let mut out = vec![0f32; indices.len() * dim];
    out.par_chunks_mut(dim)
        .zip(indices.par_iter())
        .try_for_each(|(row, &i)| source.read_rows(i, row))?;
    Ok(out)
}

/// Rows per block when a build reads its source in order (`dim` values per row): about
/// 64 MiB of f32, at least 1,024 rows.
pub fn read_block_rows(dim: usize) -> usize {
    ((16usize << 20) / dim.max(1)).max(1024)
}
