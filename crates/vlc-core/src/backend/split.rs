//! Cutting an anchor's member list in two, for the training's split maintenance: the CPU
//! reference of [`Backend::split_lists`](super::Backend::split_lists).

use crate::error::Result;
use crate::linalg::l2_sq;
use rayon::prelude::*;

/// One list cut in two by [`split_list`].
#[derive(Clone, Debug, PartialEq)]
pub struct ListSplit {
    /// Members on the minus side, in list order.
    pub minus: Vec<u32>,
    /// Members on the plus side, in list order.
    pub plus: Vec<u32>,
    /// Mean of the minus side. Layout: (dim,).
    pub minus_mean: Vec<f32>,
    /// Mean of the plus side. Layout: (dim,).
    pub plus_mean: Vec<f32>,
}

/// Cut `list` (indices of rows of `points`, (num_points, dim) row-major) of the anchor at
/// `center` (dim,) in two by one 2-means step seeded by its farthest member: the member
/// farthest from the centre (ties to the smaller index) sets the axis `farthest − center`, and
/// members whose `(x − center)·axis` is positive go to the plus side. `None` when the list has
/// fewer than 2 members or a side is empty. Every reduction has a fixed order, so the result
/// does not depend on the thread count.
pub fn split_list(points: &[f32], dim: usize, center: &[f32], list: &[u32]) -> Option<ListSplit> {
    if list.len() < 2 {
        return None;
    }
    let row = |i: u32| &points[i as usize * dim..(i as usize + 1) * dim];
    let (far, _) = list
        .par_iter()
        .with_min_len(256)
        .map(|&i| (i, l2_sq(row(i), center)))
        .reduce_with(|x, y| {
            if y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)) == std::cmp::Ordering::Greater {
                y
            } else {
                x
            }
        })
        .unwrap();
    let axis: Vec<f32> = row(far).iter().zip(center).map(|(p, c)| p - c).collect();
    let side: Vec<bool> = list
        .par_iter()
        .with_min_len(256)
        .map(|&i| {
            let proj: f32 = row(i)
                .iter()
                .zip(center)
                .zip(&axis)
                .map(|((x, c), a)| (x - c) * a)
                .sum();
            proj > 0.0
        })
        .collect();
    let (mut plus, mut minus) = (Vec::new(), Vec::new());
    for (&i, &up) in list.iter().zip(&side) {
        if up {
            plus.push(i);
        } else {
            minus.push(i);
        }
    }
    if plus.is_empty() || minus.is_empty() {
        return None;
    }
    // Sums over fixed chunks of 256 members, added in chunk order.
    let mean = |ids: &[u32]| -> Vec<f32> {
        let partial: Vec<Vec<f64>> = ids
            .par_chunks(256)
            .map(|chunk| {
                let mut m = vec![0f64; dim];
                for &i in chunk {
                    m.iter_mut().zip(row(i)).for_each(|(a, &x)| *a += x as f64);
                }
                m
            })
            .collect();
        let mut m = vec![0f64; dim];
        for p in &partial {
            m.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        }
        m.into_iter()
            .map(|v| (v / ids.len() as f64) as f32)
            .collect()
    };
    Some(ListSplit {
        minus_mean: mean(&minus),
        plus_mean: mean(&plus),
        minus,
        plus,
    })
}

/// Validate [`Backend::split_lists`](super::Backend::split_lists) arguments: `centers` holds
/// one row per list and every member is a row of `points`. Returns num_points.
pub fn check_split_args(
    points: &[f32],
    dim: usize,
    centers: &[f32],
    lists: &[&[u32]],
) -> Result<usize> {
    let num_points = super::rows_of("points", points.len(), dim)?;
    let num_centers = super::rows_of("centers", centers.len(), dim)?;
    if num_centers != lists.len() {
        return Err(crate::VlcError::DimensionMismatch {
            what: "split centres (one per list)".into(),
            expected: lists.len(),
            actual: num_centers,
        });
    }
    let largest = lists.iter().filter_map(|l| l.iter().max()).max().copied();
    if let Some(bad) = largest.filter(|&i| i as usize >= num_points) {
        return Err(crate::VlcError::param(
            "lists",
            format!("member {bad} is out of range for {num_points} points"),
        ));
    }
    Ok(num_points)
}

/// [`split_list`] for each list, in parallel, after [`check_split_args`]; results in list
/// order.
pub fn split_lists(
    points: &[f32],
    dim: usize,
    centers: &[f32],
    lists: &[&[u32]],
) -> Result<Vec<Option<ListSplit>>> {
    check_split_args(points, dim, centers, lists)?;
    Ok(split_checked_lists(points, dim, centers, lists))
}

/// [`split_lists`] for arguments the caller already passed through [`check_split_args`].
pub fn split_checked_lists(
    points: &[f32],
    dim: usize,
    centers: &[f32],
    lists: &[&[u32]],
) -> Vec<Option<ListSplit>> {
    lists
        .par_iter()
        .enumerate()
        .map(|(i, list)| split_list(points, dim, &centers[i * dim..(i + 1) * dim], list))
        .collect()
}

/// `lists` concatenated for a device, with the start of each: returns `(offsets, members)`;
/// list `l` is `members[offsets[l]..offsets[l + 1]]`. The caller checked that the total fits
/// a u32.
pub fn flatten_lists(lists: &[&[u32]]) -> (Vec<u32>, Vec<u32>) {
    let total: usize = lists.iter().map(|l| l.len()).sum();
    let mut offsets = Vec::with_capacity(lists.len() + 1);
    let mut members = Vec::with_capacity(total);
    offsets.push(0u32);
    for l in lists {
        members.extend_from_slice(l);
        offsets.push(members.len() as u32);
    }
    (offsets, members)
}

/// The [`ListSplit`]s of `lists` from a device's cut (the layouts of
/// [`flatten_lists`]): `side` holds 1 for each member on the plus side, `means` the minus then
/// plus mean of each list ((num_lists, 2, dim)), `counts` the minus and plus sizes
/// ((num_lists, 2)). Lists of fewer than 2 members, or with an empty side, give None.
pub fn assemble_splits(
    lists: &[&[u32]],
    offsets: &[u32],
    side: &[u32],
    means: &[f32],
    counts: &[u32],
    dim: usize,
) -> Vec<Option<ListSplit>> {
    lists
        .iter()
        .enumerate()
        .map(|(l, list)| {
            let (n_minus, n_plus) = (counts[2 * l], counts[2 * l + 1]);
            if list.len() < 2 || n_minus == 0 || n_plus == 0 {
                return None;
            }
            let sides = &side[offsets[l] as usize..offsets[l + 1] as usize];
            let (mut minus, mut plus) = (
                Vec::with_capacity(n_minus as usize),
                Vec::with_capacity(n_plus as usize),
            );
            for (&i, &s) in list.iter().zip(sides) {
                if s != 0 {
                    plus.push(i);
                } else {
                    minus.push(i);
                }
            }
            let m = &means[l * 2 * dim..(l + 1) * 2 * dim];
            Some(ListSplit {
                minus,
                plus,
                minus_mean: m[..dim].to_vec(),
                plus_mean: m[dim..].to_vec(),
            })
        })
        .collect()
}
