//! Input readers: npy (f32, f64, f16, i32, i64), fvecs, bvecs, ivecs, raw f32; malformed files.

use std::path::Path;
use vlc::io::{npy_bytes, read_ids, read_vectors, NpyType};
use vlc::VlcError;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn vecs(dim: i32, rows: &[Vec<u8>]) -> Vec<u8> {
    rows.iter()
        .flat_map(|r| dim.to_le_bytes().into_iter().chain(r.iter().copied()))
        .collect()
}

#[test]
fn every_format_reads_the_same_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f16_bytes: Vec<u8> = values
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let paths = [
        write(
            dir.path(),
            "a.npy",
            &npy_bytes(NpyType::F32, 3, 4, &f32_bytes),
        ),
        write(
            dir.path(),
            "b.npy",
            &npy_bytes(NpyType::F16, 3, 4, &f16_bytes),
        ),
        // NumPy's default float64, narrowed to f32 (these values are exact in f32).
        write(
            dir.path(),
            "b64.npy",
            &npy_bytes(
                NpyType::F64,
                3,
                4,
                &values
                    .iter()
                    .flat_map(|v| (*v as f64).to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
        ),
        write(
            dir.path(),
            "c.fvecs",
            &vecs(
                4,
                &f32_bytes.chunks(16).map(|c| c.to_vec()).collect::<Vec<_>>(),
            ),
        ),
        write(dir.path(), "d.f32", &f32_bytes),
    ];
    for p in &paths {
        let m = read_vectors(p, Some(4)).unwrap();
        assert_eq!((m.rows, m.cols), (3, 4), "{}", p.display());
        assert_eq!(m.data, values, "{}", p.display());
    }
    // f64 rounds to the nearest f32; beyond f32's range it is reported as non-finite, with
    // its row and column.
    let tenth: Vec<u8> = [0.1f64, 1e300]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let big = write(
        dir.path(),
        "big.npy",
        &npy_bytes(NpyType::F64, 1, 2, &tenth),
    );
    match read_vectors(&big, None).unwrap_err() {
        VlcError::NonFinite {
            row: 0, column: 1, ..
        } => {}
        e => panic!("unexpected {e}"),
    }
    let tenth = write(
        dir.path(),
        "tenth.npy",
        &npy_bytes(NpyType::F64, 1, 1, &0.1f64.to_le_bytes()),
    );
    assert_eq!(read_vectors(&tenth, None).unwrap().data, vec![0.1f32]);
    let b = write(dir.path(), "e.bvecs", &vecs(2, &[vec![1, 2], vec![250, 0]]));
    assert_eq!(
        read_vectors(&b, None).unwrap().data,
        vec![1.0, 2.0, 250.0, 0.0]
    );
}

#[test]
fn ground_truth_formats() {
    let dir = tempfile::tempdir().unwrap();
    let i32s: Vec<u8> = [3i32, 1, 4, 1, 5, 9]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let i64s: Vec<u8> = [3i64, 1, 4, 1, 5, 9]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let a = write(dir.path(), "g.npy", &npy_bytes(NpyType::I32, 2, 3, &i32s));
    let b = write(dir.path(), "h.npy", &npy_bytes(NpyType::I64, 2, 3, &i64s));
    let c = write(
        dir.path(),
        "i.ivecs",
        &vecs(3, &i32s.chunks(12).map(|c| c.to_vec()).collect::<Vec<_>>()),
    );
    // NumPy's unsigned ids (`np.uint32`, `np.uint64`), the same bytes as the signed ones.
    let d = write(dir.path(), "u.npy", &npy_bytes(NpyType::U32, 2, 3, &i32s));
    let e = write(dir.path(), "v.npy", &npy_bytes(NpyType::U64, 2, 3, &i64s));
    for p in [a, b, c, d.clone(), e] {
        let m = read_ids(&p).unwrap();
        assert_eq!(
            (m.rows, m.cols, m.data.clone()),
            (2, 3, vec![3, 1, 4, 1, 5, 9])
        );
    }
    // A uint64 id beyond i64's range is an error naming it, not a wrapped negative id.
    let huge = write(
        dir.path(),
        "huge.npy",
        &npy_bytes(NpyType::U64, 1, 1, &u64::MAX.to_le_bytes()),
    );
    let err = read_ids(&huge).unwrap_err().to_string();
    assert!(err.contains(&u64::MAX.to_string()), "{err}");
    // Unsigned ids are not vectors.
    let err = read_vectors(&d, None).unwrap_err().to_string();
    assert!(err.contains("<u4"), "{err}");
}

#[test]
fn malformed_inputs_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = [1.0f32, f32::NAN, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let nan = write(dir.path(), "nan.npy", &npy_bytes(NpyType::F32, 2, 2, &body));
    match read_vectors(&nan, None).unwrap_err() {
        VlcError::NonFinite {
            row: 0, column: 1, ..
        } => {}
        e => panic!("{e}"),
    }
    let full = npy_bytes(NpyType::F32, 2, 2, &body);
    let short = write(dir.path(), "short.npy", &full[..full.len() - 3]);
    assert!(matches!(
        read_vectors(&short, None),
        Err(VlcError::MalformedInput { .. })
    ));
    let empty = write(dir.path(), "empty.npy", &npy_bytes(NpyType::F32, 0, 4, &[]));
    assert!(matches!(
        read_vectors(&empty, None),
        Err(VlcError::EmptyInput { .. })
    ));
    let wrong_dim = write(dir.path(), "w.npy", &npy_bytes(NpyType::F32, 1, 4, &body));
    assert!(matches!(
        read_vectors(&wrong_dim, Some(5)),
        Err(VlcError::DimensionMismatch {
            expected: 5,
            actual: 4,
            ..
        })
    ));
    let ragged = write(
        dir.path(),
        "r.fvecs",
        &[vecs(2, &[vec![0; 8]]), vecs(3, &[vec![0; 12]])].concat(),
    );
    assert!(matches!(
        read_vectors(&ragged, None),
        Err(VlcError::MalformedInput { .. })
    ));
    let foreign = write(dir.path(), "x.npy", b"PK\x03\x04 a zip file");
    assert!(matches!(
        read_vectors(&foreign, None),
        Err(VlcError::MalformedInput { .. })
    ));
    let raw = write(dir.path(), "raw.bin", &[0u8; 10]);
    assert!(matches!(
        read_vectors(&raw, None),
        Err(VlcError::InvalidParameter { name: "dim", .. })
    ));
    assert!(matches!(
        read_vectors(&raw, Some(2)),
        Err(VlcError::MalformedInput { .. })
    ));
    assert!(matches!(
        read_vectors(Path::new("/no/such/file.npy"), None),
        Err(VlcError::Io { .. })
    ));
    assert!(matches!(
        read_vectors(&dir.path().join("v.csv"), None),
        Err(VlcError::UnsupportedFormat { .. })
    ));
    let fortran = b"\x93NUMPY\x01\x00\x46\x00{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }          \n\x00\x00\x80\x3f";
    let f = write(dir.path(), "f.npy", fortran);
    let err = read_vectors(&f, None).unwrap_err().to_string();
    assert!(err.contains("Fortran") || err.contains("needs"), "{err}");
    // An integer array is not vectors, and the error says which types are.
    let ints: Vec<u8> = [1i64, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    let ids = write(dir.path(), "ids.npy", &npy_bytes(NpyType::I64, 1, 2, &ints));
    let err = read_vectors(&ids, None).unwrap_err().to_string();
    assert!(
        err.contains("<i8") && err.contains("<f4, <f8, <f2 or u1"),
        "{err}"
    );
    // A big-endian array names the types read, vectors and ids apart.
    let big = b"\x93NUMPY\x01\x00\x46\x00{'descr': '>f4', 'fortran_order': False, 'shape': (1, 1), }         \n\x3f\x80\x00\x00";
    let err = read_vectors(&write(dir.path(), "big.npy", big), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(">f4") && err.contains("for vectors") && err.contains("for ids"),
        "{err}"
    );
}
