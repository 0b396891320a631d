//! Validation and normalisation of vector buffers.

use crate::error::{Result, VlcError};
use rayon::prelude::*;

/// Check that `data` is a non-empty (n, dim) row-major buffer of finite values. Errors name
/// the first offending row and column.
pub fn validate_vectors(data: &[f32], dim: usize, what: &str) -> Result<()> {
    if dim == 0 {
        return Err(VlcError::param("dim", "must be at least 1"));
    }
    if data.is_empty() {
        return Err(VlcError::EmptyInput {
            what: what.to_string(),
        });
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
            row,
            column,
            value: data[row * dim + column],
        });
    }
    Ok(())
}

/// A copy of `data` (n, dim) with every row scaled to unit length (zero rows stay zero).
pub fn normalize_rows(data: &[f32], dim: usize) -> Vec<f32> {
    let mut out = data.to_vec();
    out.par_chunks_mut(dim).for_each(|row| {
        let norm = crate::linalg::dot(row, row).sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|v| *v /= norm);
        }
    });
    out
}
