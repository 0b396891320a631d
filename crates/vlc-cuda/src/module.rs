//! NVRTC compilation straight to CUBIN for the device's architecture, with a disk cache.

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::{sys as nvrtc_sys, Ptx};
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use vlc::{Result, VlcError};

fn err(reason: impl std::fmt::Display) -> VlcError {
    VlcError::Backend {
        backend: "cuda".into(),
        reason: reason.to_string(),
    }
}

/// Compiles and loads embedded kernel sources for one device.
pub struct KernelCache {
    ctx: Arc<CudaContext>,
    arch: String,
    nvrtc_version: (i32, i32),
    dir: Option<PathBuf>,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl KernelCache {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let (major, minor) = ctx.compute_capability().map_err(err)?;
        let (mut vmaj, mut vmin) = (0, 0);
        // SAFETY: nvrtcVersion writes two integers.
        unsafe { nvrtc_sys::nvrtcVersion(&mut vmaj, &mut vmin) }
            .result()
            .map_err(err)?;
        let dir = std::env::var_os("VLC_KERNEL_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("vlc")))
            .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/vlc")));
        Ok(KernelCache {
            ctx: ctx.clone(),
            arch: format!("sm_{major}{minor}"),
            nvrtc_version: (vmaj, vmin),
            dir,
        })
    }

    /// The module for `src`, from the disk cache or compiled now.
    pub fn load(&self, stem: &str, src: &str) -> Result<Arc<CudaModule>> {
        self.load_with(stem, src, &[])
    }

    /// [`load`](Self::load) with extra NVRTC options (e.g. `--fmad=false`), which are part of
    /// the cache key.
    pub fn load_with(&self, stem: &str, src: &str, options: &[&str]) -> Result<Arc<CudaModule>> {
        let keyed = format!("{src}\n// {}", options.join(" "));
        let key = format!(
            "{stem}-{:016x}-{}-nvrtc{}.{}.cubin",
            fnv1a(if options.is_empty() { src } else { &keyed }.as_bytes()),
            self.arch,
            self.nvrtc_version.0,
            self.nvrtc_version.1
        );
        let cached = self.dir.as_ref().map(|d| d.join(&key));
        let cubin = match cached.as_ref().and_then(|p| std::fs::read(p).ok()) {
            Some(bytes) => bytes,
            None => {
                let bytes = self.compile(stem, src, options)?;
                if let Some(p) = &cached {
                    // A cache write failure only costs a recompile next time.
                    if std::fs::create_dir_all(p.parent().unwrap()).is_ok() {
                        let _ = vlc::format::write_atomic(p, &bytes);
                    }
                }
                bytes
            }
        };
        self.ctx.load_module(Ptx::from_binary(cubin)).map_err(|e| {
            err(format!(
                "loading kernel `{stem}` ({}, NVRTC {}.{}) failed: {e}; if the driver is older than NVRTC, update the driver or use a CUDA library matching it",
                self.arch, self.nvrtc_version.0, self.nvrtc_version.1
            ))
        })
    }

    fn compile(&self, stem: &str, src: &str, options: &[&str]) -> Result<Vec<u8>> {
        let c_src = CString::new(src).map_err(err)?;
        let c_name = CString::new(format!("{stem}.cu")).map_err(err)?;
        let mut prog = std::ptr::null_mut();
        // SAFETY: the strings outlive the program; `prog` is destroyed on every path below.
        unsafe {
            nvrtc_sys::nvrtcCreateProgram(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        }
        .result()
        .map_err(err)?;
        let opts: Vec<CString> = [
            format!("--gpu-architecture={}", self.arch),
            "--std=c++17".into(),
            "-default-device".into(),
        ]
        .into_iter()
        .chain(options.iter().map(|o| o.to_string()))
        .map(|o| CString::new(o).unwrap())
        .collect();
        let ptrs: Vec<*const std::ffi::c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let result = (|| -> Result<Vec<u8>> {
            // SAFETY: `prog` is a live program; `ptrs` point into `opts`, alive here.
            let compiled =
                unsafe { nvrtc_sys::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr()) };
            if compiled.result().is_err() {
                let mut size = 0usize;
                // SAFETY: live program; the log buffer has the size NVRTC reported.
                let log = unsafe {
                    let _ = nvrtc_sys::nvrtcGetProgramLogSize(prog, &mut size);
                    let mut buf = vec![0u8; size.max(1)];
                    let _ = nvrtc_sys::nvrtcGetProgramLog(
                        prog,
                        buf.as_mut_ptr() as *mut std::ffi::c_char,
                    );
                    String::from_utf8_lossy(&buf)
                        .trim_end_matches('\0')
                        .to_string()
                };
                return Err(err(format!(
                    "NVRTC {}.{} failed to compile `{stem}` for {}: {log}",
                    self.nvrtc_version.0, self.nvrtc_version.1, self.arch
                )));
            }
            let mut size = 0usize;
            // SAFETY: live, compiled program; the buffer has the reported CUBIN size.
            unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(err)?;
            let mut cubin = vec![0u8; size];
            // SAFETY: as above.
            unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut std::ffi::c_char) }
                .result()
                .map_err(err)?;
            Ok(cubin)
        })();
        // SAFETY: `prog` was created above and is destroyed exactly once; the error is ignored
        // on purpose (never panic while cleaning up).
        let _ = unsafe { nvrtc_sys::nvrtcDestroyProgram(&mut prog) };
        result
    }
}
