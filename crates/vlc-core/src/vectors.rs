//! Validation, normalisation and centring of vector buffers.

use crate::error::{Result, VlcError};
use crate::index::Metric;
use rayon::prelude::*;
use std::borrow::Cow;

/// Values from which the row checks run on rayon's threads. Below it (a query, a few
/// queries) a check takes microseconds on the calling thread, and handing it to the pool
/// would only add a wait for one of the pool's threads.
const PARALLEL_CHECK_MIN: usize = 1 << 16;

/// The largest squared length a row may have, a sixteenth of `f32::MAX` (about 2.1e37: a
/// length of about 4.6e18). Search and training compute squared distances in f32, some in
/// the form `‖x‖² − 2⟨x, c⟩ + ‖c‖²`; between two rows within this limit every term and the
/// distance itself stay below a quarter of `f32::MAX`, which leaves room for the sums built on
/// them. Past it a distance can overflow to infinity, and a search that compares infinities
/// (or their difference, NaN) would rank nothing: clustered rows scaled by 1e19 gave recall@10
/// 0 before this check (`bench/scale_check.py`). Real embeddings lie many orders of magnitude
/// below.
pub const MAX_SQUARED_LENGTH: f32 = f32::MAX / 16.0;

/// The smallest spread (mean squared distance of the rows to their mean) a build accepts,
/// unless it is 0 (every row the same), f32's smallest normal number (about 1.2e-38). Below it
/// squared distances between rows are subnormal or 0 in f32 and lose their precision: on
/// clustered 48-d data (spread 51) scaled by 1e-21 (spread 5e-41) recall@10 fell to 0.17,
/// and to 0.03 from 1e-23, where the exact ground truth still held; scaled by 1e-20 (spread
/// 5e-39, refused now) it was still 0.99, at the edge (`bench/scale_check.py`). Real
/// embeddings lie many orders of magnitude above.
pub const MIN_SPREAD: f32 = f32::MIN_POSITIVE;

/// Check that `data` is a non-empty (n, dim) row-major buffer of finite values, no row longer
/// than [`MAX_SQUARED_LENGTH`] allows. Errors name the first offending row (and column).
pub fn validate_vectors(data: &[f32], dim: usize, what: &str) -> Result<()> {
    check_whole_rows(data, dim, what)?;
    if data.is_empty() {
        return Err(VlcError::EmptyInput {
            what: what.to_string(),
        });
    }
    check_rows(data, dim, 0, what)
}

/// [`validate_vectors`], and for the cosine metric also that no row has zero
/// length: such a row has no direction, so its cosine with anything is undefined. Left as it
/// is, a zero vector would lie at squared distance 1 from every unit vector, as if its cosine
/// with each were 0.5, and come up among the neighbours of every query whose real neighbours
/// are less similar than that. The error names the first such row.
pub fn validate_vectors_for_metric(
    data: &[f32],
    dim: usize,
    what: &str,
    metric: Metric,
) -> Result<()> {
    validate_vectors(data, dim, what)?;
    if metric == Metric::Cosine {
        check_nonzero(data, dim, 0, what)?;
    }
    Ok(())
}

/// Check that no row of `data` (rows, dim), row-major, has zero length, as the cosine metric
/// needs (see [`validate_vectors_for_metric`]); an error names the first such row, counted
/// from `first_row`. A row so short that its squared length rounds to 0 in f32 (every value
/// below about 1e-19 in size) counts as zero: normalising could not give it a direction.
fn check_nonzero(data: &[f32], dim: usize, first_row: usize, what: &str) -> Result<()> {
    let is_zero = |row: &[f32]| crate::linalg::dot(row, row) == 0.0;
    let zero = if data.len() < PARALLEL_CHECK_MIN {
        data.chunks(dim).position(is_zero)
    } else {
        data.par_chunks(dim).position_first(is_zero)
    };
    match zero {
        Some(row) => Err(VlcError::ZeroVector {
            what: what.to_string(),
            row: first_row + row,
        }),
        None => Ok(()),
    }
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

/// Check that every value of `data` (rows, dim), row-major, is finite and no row's squared
/// length exceeds [`MAX_SQUARED_LENGTH`]; an error names the first offending row (counted from
/// `first_row`, the row number of `data`'s first row) and, for a non-finite value, its column.
fn check_rows(data: &[f32], dim: usize, first_row: usize, what: &str) -> Result<()> {
    // A row with a non-finite value has a non-finite squared length (NaN or infinity), so one
    // dot product per row finds both faults.
    let bad_row = |row: &[f32]| {
        let squared_length = crate::linalg::dot(row, row);
        squared_length.is_nan() || squared_length > MAX_SQUARED_LENGTH
    };
    let bad = if data.len() < PARALLEL_CHECK_MIN {
        data.chunks(dim).position(bad_row)
    } else {
        data.par_chunks(dim).position_first(bad_row)
    };
    let Some(row) = bad else {
        return Ok(());
    };
    let values = &data[row * dim..(row + 1) * dim];
    match values.iter().position(|v| !v.is_finite()) {
        Some(column) => Err(VlcError::NonFinite {
            what: what.to_string(),
            row: first_row + row,
            column,
            value: values[column],
        }),
        None => Err(VlcError::TooLarge {
            what: what.to_string(),
            row: first_row + row,
            squared_length: values.iter().map(|&v| v as f64 * v as f64).sum(),
            limit: MAX_SQUARED_LENGTH,
        }),
    }
}

/// A copy of `data` (n, dim) with every row scaled to unit length (zero rows stay zero).
pub fn normalize_rows(data: &[f32], dim: usize) -> Vec<f32> {
    let mut out = data.to_vec();
    normalize_rows_in_place(&mut out, dim);
    out
}

/// Scale every row of `data` (n, dim), row-major, to unit length in place (zero rows stay zero).
pub fn normalize_rows_in_place(data: &mut [f32], dim: usize) {
    data.par_chunks_mut(dim)
        .for_each(|row| prepare_row_in_place(row, true, None));
}

/// Rows (n, dim), row-major, in an index's coordinates: scaled to unit length when
/// `normalize` (the cosine metric), then translated by minus `centre` (layout: (dim,)) when the
/// index has one (see [`crate::Index::centre`]). Borrowed when neither applies.
pub fn prepare_rows<'a>(
    rows: &'a [f32],
    dim: usize,
    normalize: bool,
    centre: Option<&[f32]>,
) -> Cow<'a, [f32]> {
    if !normalize && centre.is_none() {
        return Cow::Borrowed(rows);
    }
    let mut out = rows.to_vec();
    prepare_rows_in_place(&mut out, dim, normalize, centre);
    Cow::Owned(out)
}

/// [`prepare_rows`] of one row (dim,), in place and on the calling thread.
pub(crate) fn prepare_row_in_place(row: &mut [f32], normalize: bool, centre: Option<&[f32]>) {
    if normalize {
        let norm = crate::linalg::dot(row, row).sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|v| *v /= norm);
        }
    }
    if let Some(centre) = centre {
        row.iter_mut().zip(centre).for_each(|(v, c)| *v -= c);
    }
}

/// [`prepare_rows`] in place.
pub(crate) fn prepare_rows_in_place(
    rows: &mut [f32],
    dim: usize,
    normalize: bool,
    centre: Option<&[f32]>,
) {
    if normalize || centre.is_some() {
        rows.par_chunks_mut(dim)
            .for_each(|row| prepare_row_in_place(row, normalize, centre));
    }
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

/// The rows a build works on: those of `inner`, checked to be finite and within
/// [`MAX_SQUARED_LENGTH`] as they are read (an error names the row in `inner`'s numbering), in
/// the index's coordinates ([`prepare_rows`]).
pub(crate) struct PreparedRows<'a> {
    pub inner: &'a dyn VectorSource,
    pub normalize: bool,
    /// Subtracted from every row (after normalisation). Layout: (dim,).
    pub centre: Option<&'a [f32]>,
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
        check_rows(out, self.dim(), start, &self.inner.describe())?;
        if self.normalize {
            check_nonzero(out, self.dim(), start, &self.inner.describe())?;
        }
        prepare_rows_in_place(out, self.dim(), self.normalize, self.centre);
        Ok(())
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Rows a build samples (evenly spaced) to decide whether to centre the index, at most.
pub const CENTRE_SAMPLE_ROWS: usize = 16_384;

/// An index is centred when its rows' mean lies farther from the origin than this many times
/// their spread (the root mean squared distance to the mean).
pub const CENTRE_RATIO: f64 = 4.0;

/// The centre a build subtracts from every vector and query, or `None`: the mean of a sample of
/// `source`'s rows when it lies more than [`CENTRE_RATIO`] times their spread from the origin.
/// Errors ([`VlcError::TooSmall`]) when the sample's spread is positive but below
/// [`MIN_SPREAD`].
///
/// Search computes squared distances as `‖q‖² − 2⟨q, c⟩ + ‖c‖²` (the anchor ranking) and scores
/// codes against a quantised copy of the query, so its error grows with the norms involved,
/// not with the distances between the vectors. For data whose mean is far from the origin
/// next to the spread around it (e.g. all coordinates near 50 with a spread of 0.1) that
/// error swamps the distances: on clustered 128-d data recall@10 fell from 0.599 to 0.414
/// (`rabitq1`) and from 0.990 to 0.947 (`rabitq1` refined by `sq8`) at 100 times the spread,
/// and to 0.011 and 0.043 at 1,000 times (`bench/offset_check.py`). A
/// translation changes no L2 distance, so centred rows give the same neighbours with errors
/// at the scale of the spread. Data nearer the origin (every embedding set benchmarked here,
/// at 1.5 times at most) is left as it is, so its indexes are unchanged.
pub(crate) fn choose_centre(source: &dyn VectorSource) -> Result<Option<Vec<f32>>> {
    let (n, dim) = (source.num_rows(), source.dim());
    let stride = n.div_ceil(CENTRE_SAMPLE_ROWS).max(1);
    let sample: Vec<usize> = (0..n).step_by(stride).collect();
    let rows = gather_rows(source, &sample)?;
    let m = sample.len().max(1) as f64;
    let mean = column_means(&rows, dim);
    let spread: f64 = rows
        .chunks_exact(dim)
        .map(|row| {
            row.iter()
                .zip(&mean)
                .map(|(&v, &c)| (v as f64 - c).powi(2))
                .sum::<f64>()
        })
        .sum::<f64>()
        / m;
    if spread > 0.0 && spread < MIN_SPREAD as f64 {
        return Err(VlcError::TooSmall {
            what: source.describe(),
            spread,
            limit: MIN_SPREAD,
        });
    }
    let norm: f64 = mean.iter().map(|c| c * c).sum();
    Ok((norm > CENTRE_RATIO * CENTRE_RATIO * spread)
        .then(|| mean.iter().map(|&c| c as f32).collect()))
}

/// The mean of the rows of `rows` (n ≥ 1, dim), row-major, summed in f64. Layout: (dim,).
pub(crate) fn column_means(rows: &[f32], dim: usize) -> Vec<f64> {
    let mut mean = vec![0f64; dim];
    for row in rows.chunks_exact(dim) {
        mean.iter_mut().zip(row).for_each(|(s, &v)| *s += v as f64);
    }
    let n = (rows.len() / dim).max(1) as f64;
    mean.iter_mut().for_each(|s| *s /= n);
    mean
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
