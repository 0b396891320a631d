// Temperature-scaled anchor update: anchor += step * (mean - anchor) where kept > 0.
// means: (num_anchors, dim), the host's f64 sum / kept rounded to f32.

struct Params {
    num_anchors: u32,
    dim: u32,
    step: f32,
    row_stride: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> anchors: array<f32>;
@group(0) @binding(2) var<storage, read> means: array<f32>;
@group(0) @binding(3) var<storage, read> kept: array<u32>;

@compute @workgroup_size(64)
fn update_anchors(@builtin(global_invocation_id) g: vec3<u32>) {
    let idx = g.y * p.row_stride + g.x;
    if (idx >= p.num_anchors * p.dim) {
        return;
    }
    if (kept[idx / p.dim] == 0u) {
        return;
    }
    anchors[idx] = anchors[idx] + p.step * (means[idx] - anchors[idx]);
}
