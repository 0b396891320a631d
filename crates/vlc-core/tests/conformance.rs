//! The backend conformance suite (`vlc::conformance`) on the CPU reference backend.

vlc::conformance_suite!(cpu, Some(Box::new(vlc::CpuBackend)));

use vlc::backend::{AnchorSums, Nearest};
use vlc::{Backend, CpuBackend, Result};

/// The CPU backend, offering the encode primitive through its reference: holds the encode
/// checks themselves to account (a codec that takes its levels from a backend must write the
/// bytes it writes on its own) without a GPU.
struct CpuWithLevels;

impl Backend for CpuWithLevels {
    fn name(&self) -> &'static str {
        "cpu with code levels"
    }
    fn nearest_anchors(
        &self,
        points: &[f32],
        anchors: &[f32],
        dim: usize,
        per_point: usize,
    ) -> Result<Nearest> {
        CpuBackend.nearest_anchors(points, anchors, dim, per_point)
    }
    fn accumulate(
        &self,
        points: &[f32],
        dim: usize,
        assignment: &[u32],
        dists: &[f32],
        thresholds: &[f32],
    ) -> Result<AnchorSums> {
        CpuBackend.accumulate(points, dim, assignment, dists, thresholds)
    }
    fn update(&self, anchors: &mut [f32], dim: usize, sums: &AnchorSums, step: f32) -> Result<()> {
        CpuBackend.update(anchors, dim, sums, step)
    }
    fn code_levels(&self, vectors: &[f32], caps: &[u32], out: &mut [u16]) -> Result<bool> {
        vlc::backend::check_code_levels_args(vectors, caps, out)?;
        vlc::codec::levels::code_levels(vectors, caps, out);
        Ok(true)
    }
    fn offers_code_levels(&self) -> bool {
        true
    }
}

#[test]
fn code_levels_offered_on_the_cpu() {
    vlc::conformance::check_code_levels(&CpuWithLevels);
}

#[test]
fn encode_through_offered_levels_matches_the_cpu() {
    vlc::conformance::check_encode_matches_cpu(&CpuWithLevels);
}
