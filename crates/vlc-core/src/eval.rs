//! Recall against ground truth.

/// Mean over queries of |top-`at` results ∩ top-`at` ground truth| / `at`.
///
/// `ids`: (num_queries, k) results, −1 for padding; `truth`: (num_queries, truth_cols).
/// Needs `at <= k` and `at <= truth_cols`.
pub fn recall_at(ids: &[i64], k: usize, truth: &[i64], truth_cols: usize, at: usize) -> f64 {
    assert!(
        at >= 1 && at <= k && at <= truth_cols,
        "recall@{at} needs k >= {at} and {at} truth columns"
    );
    let nq = ids.len() / k;
    assert_eq!(
        truth.len() / truth_cols,
        nq,
        "results and ground truth differ in query count"
    );
    let mut hits = 0usize;
    for q in 0..nq {
        let got = &ids[q * k..q * k + at];
        let want = &truth[q * truth_cols..q * truth_cols + at];
        hits += got.iter().filter(|&&g| g >= 0 && want.contains(&g)).count();
    }
    hits as f64 / (nq * at) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn recall_counts_overlap() {
        let ids = [0, 1, 2, 9, -1, 3];
        let truth = [2, 0, 1, 3, 9, 8];
        assert_eq!(super::recall_at(&ids, 3, &truth, 3, 3), 5.0 / 6.0);
        assert_eq!(super::recall_at(&ids, 3, &truth, 3, 1), 0.0);
    }
}
