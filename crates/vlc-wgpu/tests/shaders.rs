//! Every WGSL module the backend builds parses and validates with naga (the compiler wgpu uses)
//! and translates to SPIR-V, including the cooperative-matrix module that only adapters with
//! tensor cores compile at run time (so CI checks it although lavapipe never runs it). Set
//! `VLC_SPIRV_DIR` to keep the SPIR-V files (e.g. for `spirv-val`).

use naga::valid::{Capabilities, ValidationFlags, Validator};

fn check(name: &str, source: &str, capabilities: Capabilities) {
    check_with(name, source, capabilities, &[]);
}

/// As `check`, with pipeline-overridable constants set (the others keep their defaults), as
/// wgpu does when it creates a pipeline.
fn check_with(name: &str, source: &str, capabilities: Capabilities, constants: &[(&str, f64)]) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let info = Validator::new(ValidationFlags::all(), capabilities)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let mut values = naga::back::PipelineConstants::default();
    for &(key, value) in constants {
        values.insert(key.to_string(), value);
    }
    let (module, info) =
        naga::back::pipeline_constants::process_overrides(&module, &info, None, &values)
            .unwrap_or_else(|e| panic!("{name} with {constants:?}: {e}"));
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    let words = naga::back::spv::write_vec(&module, &info, &options, None)
        .unwrap_or_else(|e| panic!("{name} with {constants:?}: SPIR-V: {e}"));
    assert!(
        words.len() > 5 && words[0] == 0x0723_0203,
        "{name}: not SPIR-V"
    );
    if let Ok(dir) = std::env::var("VLC_SPIRV_DIR") {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let suffix: String = constants.iter().map(|(k, v)| format!("_{k}{v}")).collect();
        std::fs::write(format!("{dir}/{name}{suffix}.spv"), bytes).unwrap();
    }
}

#[test]
fn fp32_shaders_validate() {
    // Embedded like the backend embeds them, so the test binary runs from any directory.
    let sources = [
        ("nearest", include_str!("../src/shaders/nearest.wgsl")),
        ("accumulate", include_str!("../src/shaders/accumulate.wgsl")),
        ("update", include_str!("../src/shaders/update.wgsl")),
        ("search", include_str!("../src/shaders/search.wgsl")),
        ("split", include_str!("../src/shaders/split.wgsl")),
    ];
    for (name, source) in sources {
        check(name, source, Capabilities::empty());
    }
    // The search pipeline with its candidate pool in workgroup memory (the default keeps it in
    // the storage buffer).
    check_with(
        "search",
        include_str!("../src/shaders/search.wgsl"),
        Capabilities::empty(),
        &[("POOL_SLOTS", 2048.0)],
    );
    // ... and without the automatic pool's per-list minima (a fixed pool).
    check_with(
        "search",
        include_str!("../src/shaders/search.wgsl"),
        Capabilities::empty(),
        &[("POOL_SLOTS", 1024.0), ("LIST_MIN_SLOTS", 1.0)],
    );
    // ... and for a scalar primary code with global ranges, scored by its weights (384 of
    // them in workgroup memory).
    check_with(
        "search",
        include_str!("../src/shaders/search.wgsl"),
        Capabilities::empty(),
        &[
            ("POOL_SLOTS", 1024.0),
            ("WEIGHTED", 1.0),
            ("WEIGHT_SLOTS", 384.0),
        ],
    );
}

#[test]
fn cooperative_matrix_shader_validates() {
    let source = vlc_wgpu::coop_source();
    check(
        "nearest_coop",
        &source,
        Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP,
    );
    // Without the capabilities it must be rejected (the FP32 kernels are used there).
    let module = naga::front::wgsl::parse_str(&source).unwrap();
    assert!(
        Validator::new(ValidationFlags::all(), Capabilities::empty())
            .validate(&module)
            .is_err()
    );
}
