//! The backend conformance suite (`vlc::conformance`) on the CPU reference backend.

vlc::conformance_suite!(cpu, Some(Box::new(vlc::CpuBackend)));
