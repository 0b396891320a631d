//! Anchor-only: no residual is stored; a vector is represented by its anchor alone.
//! Every vector of a list gets the same estimated distance `‖q − c‖²`, so ranking within a
//! list is by id: recall is what it is, and VLC reports it as measured.

use super::PreparedAnchors;
use super::{CodecKind, QueryState, ResidualCodec};
use crate::error::Result;

#[derive(Clone, Debug)]
pub struct AnchorOnly {
    dim: usize,
}

impl AnchorOnly {
    pub fn new(dim: usize) -> Self {
        AnchorOnly { dim }
    }
    pub(crate) fn read_params(dim: usize, bytes: &[u8]) -> Result<Self> {
        super::expect_no_params(CodecKind::AnchorOnly, bytes)?;
        Ok(AnchorOnly { dim })
    }
}

impl ResidualCodec for AnchorOnly {
    fn kind(&self) -> CodecKind {
        CodecKind::AnchorOnly
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn encode_prepared(
        &self,
        _prepared: &PreparedAnchors,
        _points: &[f32],
        _anchors: &[f32],
        _assignment: &[u32],
        _out: &mut [u8],
    ) {
    }
    fn decode(&self, _code: &[u8], _anchor_id: u32, out: &mut [f32]) {
        out.fill(0.0);
    }
    fn prepare_query(&self, _state: &mut QueryState) {}
    fn scan(
        &self,
        _state: &mut QueryState,
        _anchor_id: u32,
        query_anchor_dist: f32,
        _codes: &[u8],
        out: &mut [f32],
    ) {
        out.fill(query_anchor_dist);
    }
    fn write_params(&self, _out: &mut Vec<u8>) {}
}
