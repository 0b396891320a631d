//! GEMM shapes of one assignment chunk on cuBLAS: TF32 with an FP32 tile, FP16 inputs with an
//! FP32 tile, FP16 inputs with an FP16 tile, BF16 inputs with an FP32 tile (zero data: the
//! timing does not depend on values). `cargo run --release -p vlc-cuda --example
//! gemm_probe -- [rows] [anchors] [dim] [repeats]` (default 65536 4096 384 20).
use cudarc::cublas::sys as cb;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (n, k, dim, repeats) = (arg(0, 65536), arg(1, 4096), arg(2, 384), arg(3, 20));
    let ctx = cudarc::driver::CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let blas = cudarc::cublas::CudaBlas::new(stream.clone())?;
    let x32 = stream.alloc_zeros::<f32>(n * dim)?;
    let c32 = stream.alloc_zeros::<f32>(k * dim)?;
    let x16 = stream.alloc_zeros::<u16>(n * dim)?;
    let c16 = stream.alloc_zeros::<u16>(k * dim)?;
    let mut t32 = stream.alloc_zeros::<f32>(n * k)?;
    let mut t16 = stream.alloc_zeros::<u16>(n * k)?;
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    let run = |name: &str,
               a: u64,
               at: cb::cudaDataType,
               b: u64,
               c: u64,
               ct: cb::cudaDataType,
               compute: cb::cublasComputeType_t|
     -> Result<(), Box<dyn std::error::Error>> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let mut times = Vec::new();
        for _ in 0..repeats {
            stream.synchronize()?;
            let t = Instant::now();
            // SAFETY: the buffers hold k x dim, n x dim and n x k elements of the named types.
            unsafe {
                cb::cublasGemmEx(
                    *blas.handle(),
                    cb::cublasOperation_t::CUBLAS_OP_T,
                    cb::cublasOperation_t::CUBLAS_OP_N,
                    k as i32,
                    n as i32,
                    dim as i32,
                    &alpha as *const f32 as *const _,
                    a as *const _,
                    at,
                    dim as i32,
                    b as *const _,
                    at,
                    dim as i32,
                    &beta as *const f32 as *const _,
                    c as *mut _,
                    ct,
                    k as i32,
                    compute,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
                )
            }
            .result()?;
            stream.synchronize()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        println!(
            "{name}: {ms:.3} ms, {:.0} TFLOP/s",
            2.0 * (n * k * dim) as f64 / ms / 1e9
        );
        Ok(())
    };
    let (a32, _g1) = c32.device_ptr(&stream);
    let (b32, _g2) = x32.device_ptr(&stream);
    let (a16, _g3) = c16.device_ptr(&stream);
    let (b16, _g4) = x16.device_ptr(&stream);
    let (o32, _g5) = t32.device_ptr_mut(&stream);
    let (o16, _g6) = t16.device_ptr_mut(&stream);
    println!("{n} x {k} x {dim}");
    run(
        "TF32 in, FP32 tile",
        a32,
        cb::cudaDataType::CUDA_R_32F,
        b32,
        o32,
        cb::cudaDataType::CUDA_R_32F,
        cb::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
    )?;
    run(
        "FP16 in, FP32 tile",
        a16,
        cb::cudaDataType::CUDA_R_16F,
        b16,
        o32,
        cb::cudaDataType::CUDA_R_32F,
        cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    )?;
    run(
        "FP16 in, FP16 tile",
        a16,
        cb::cudaDataType::CUDA_R_16F,
        b16,
        o16,
        cb::cudaDataType::CUDA_R_16F,
        cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    )?;
    run(
        "BF16 in, FP32 tile",
        a16,
        cb::cudaDataType::CUDA_R_16BF,
        b16,
        o32,
        cb::cudaDataType::CUDA_R_32F,
        cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    )?;
    Ok(())
}
